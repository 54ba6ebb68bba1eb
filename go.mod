module github.com/idem-go/idem

go 1.24

require github.com/google/uuid v1.6.0
