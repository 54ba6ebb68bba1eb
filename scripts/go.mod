module github.com/idem-go/idem/scripts

go 1.25.0

require golang.org/x/mod v0.40.0
