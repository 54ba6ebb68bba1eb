module github.com/idem-go/idem/examples/grpc

go 1.25.0

replace github.com/idem-go/idem => ../../

replace github.com/idem-go/idem/grpcidem => ../../grpcidem

require (
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4
	github.com/idem-go/idem v0.1.0
	github.com/idem-go/idem/grpcidem v0.1.0
	github.com/idem-go/idem/pgstore v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/redis/go-redis/v9 v9.22.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/bsm/redislock v0.9.4 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace github.com/idem-go/idem/pgstore => ../../pgstore
