module github.com/idem-go/idem/examples/grpc

go 1.25.0

replace github.com/idem-go/idem => ../../

replace github.com/idem-go/idem/grpcidem => ../../grpcidem

require (
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4
	github.com/idem-go/idem v0.0.0
	github.com/idem-go/idem/grpcidem v0.0.0
	github.com/redis/go-redis/v9 v9.22.0
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/bsm/redislock v0.9.4 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
)
