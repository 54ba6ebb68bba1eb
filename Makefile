# Every target runs over every module of the repository (each directory with
# a go.mod). Tests run with GOWORK=off, as a user who imports one module
# alone would build it; the committed go.work is for development only.

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c
GO          ?= go
MODULES     := $(shell find . -name go.mod -not -path './.tools/*' -exec dirname {} \; | sort)
TOOLS       := $(CURDIR)/.tools
STATICCHECK := $(TOOLS)/staticcheck
STATICCHECK_VERSION := v0.8.2
PROMTOOL    ?= $(shell command -v promtool 2>/dev/null || echo $(TOOLS)/promtool)
PROMETHEUS  ?= $(shell command -v prometheus 2>/dev/null || echo $(TOOLS)/prometheus)
FRAMEWORK   ?= gin
IDEM_REDIS_ADDR ?= 127.0.0.1:6379
export IDEM_REDIS_ADDR

SWAG        := $(GO) run github.com/swaggo/swag/cmd/swag@v1.16.6

.PHONY: all demo test test-integration bench lint fmt tools clean swagger

all: lint test

## demo: run examples/$(FRAMEWORK) on the memory store and drive it with the demo
## client; with DEMO_URL, drive the example already running there instead.
demo:
	@mkdir -p bin
	cd examples && GOWORK=off $(GO) build -o ../bin/server-$(FRAMEWORK) ./$(FRAMEWORK)
	cd examples && GOWORK=off $(GO) build -o ../bin/demo ./demo
	@if [ -n "$(DEMO_URL)" ]; then ./bin/demo -url '$(DEMO_URL)'; else ./bin/demo -exec ./bin/server-$(FRAMEWORK); fi

## test: unit tests of every module, with the race detector; every module
## runs, and the target fails at the end if any did. Then the allocation
## tests again without it, which adds allocations of its own: their exact
## budgets hold only there.
test:
	@failed=; for m in $(MODULES); do \
		echo "==> test $$m"; \
		(cd $$m && GOWORK=off $(GO) build ./... && GOWORK=off $(GO) test -race -count=1 ./...) || failed="$$failed $$m"; \
	done; \
	echo "==> allocation budgets, without the race detector"; \
	GOWORK=off $(GO) test -count=1 -run 'Alloc|AppendsToDst|FormBound|WideObject' ./core/... ./internal/... || failed="$$failed allocations"; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi

## test-integration: unit and integration tests against real services
## (Redis at $(IDEM_REDIS_ADDR), PostgreSQL at 127.0.0.1:5432; redis-server,
## PostgreSQL and Prometheus processes the tests start themselves, Prometheus
## installed into .tools/ if it is not on the PATH); every module runs.
test-integration: $(PROMETHEUS)
	@failed=; for m in $(MODULES); do \
		echo "==> test-integration $$m"; \
		(cd $$m && IDEM_PROMETHEUS=$(PROMETHEUS) GOWORK=off $(GO) test -race -count=1 -timeout 20m -tags integration ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi

## bench: Go benchmarks of every module, with allocations; each case also
## as a throughput ratio to the "bare" baseline of the same run. Every
## module runs, and the target fails at the end if any did (as test does).
bench:
	@failed=; for m in $(MODULES); do \
		echo "==> bench $$m"; \
		(cd $$m && GOWORK=off $(GO) test -run '^$$' -bench . -benchmem ./...) | awk -f $(CURDIR)/scripts/benchratio.awk || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi

## loadtest: wrk against idem on the Redis store at $(REDIS_URL), as
## configured by default (its scripts batched), unbatched, over go-redis's
## AutoPipeliner and with Config.ReplayCache, on the memory store, on the
## PostgreSQL store at $(LOADTEST_POSTGRES) (empty: none; with it, a handler
## that inserts an order in the transactional and the lease mode against
## that insert without idem, and write transactions per request), and on Fiber v2:
## fiberidem and Fiber's own idempotency middleware on their memory stores:
## first requests (fresh key), replays (fixed key) and requests without a
## key, each as a ratio to the same handler without the middleware on the
## same server sent the same requests, run just before and after it (median
## of the rounds).
REDIS_URL            ?= redis://$(IDEM_REDIS_ADDR)/0
LOADTEST_POSTGRES    ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
LOADTEST_DURATION    ?= 2s
LOADTEST_CONNECTIONS ?= 32
LOADTEST_ROUNDS      ?= 5
.PHONY: loadtest
loadtest:
	@command -v wrk >/dev/null 2>&1 || (apt-get update && apt-get install -y wrk)
	cd loadtest && GOWORK=off $(GO) run . -redis '$(REDIS_URL)' -postgres '$(LOADTEST_POSTGRES)' \
		-duration $(LOADTEST_DURATION) -connections $(LOADTEST_CONNECTIONS) -rounds $(LOADTEST_ROUNDS)

## lint: gofmt, no line over 160 characters in a Go file that is not
## generated (*.pb.go, swag's docs/docs.go), go vet and staticcheck over
## every module.
lint: $(STATICCHECK)
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@long=$$(find . -name '*.go' -not -name '*.pb.go' -not -path '*/docs/docs.go' -not -path './.tools/*' -print0 | \
		LC_ALL=C.UTF-8 xargs -0 awk 'length > 160 {print FILENAME ":" FNR ": " length " characters"}'); \
	if [ -n "$$long" ]; then echo "lines over 160 characters:"; echo "$$long"; exit 1; fi
	@set -e; for m in $(MODULES); do \
		echo "==> lint $$m"; \
		(cd $$m && GOWORK=off $(GO) vet ./... && GOWORK=off $(STATICCHECK) ./...); \
		(cd $$m && GOWORK=off $(GO) vet -tags integration ./... && GOWORK=off $(STATICCHECK) -tags integration ./...); \
	done

## swagger: regenerate the examples' OpenAPI docs from their annotations with
## swag, then document the Idempotency-Key header with idemswag.
swagger:
	@set -e; for fw in nethttp gin echo echov5 fiber fiberv3; do \
		echo "==> swagger examples/$$fw"; \
		(cd examples/$$fw && $(SWAG) init -q -g main.go -d ./,../internal/orders -o docs && \
		 GOWORK=off $(GO) run github.com/idem-go/idem/swagger/cmd/idemswag -dir docs -op "POST /orders"); \
	done

## release: every module requires the idem modules at $(VERSION), committed,
## and every released module tagged (v0.1.0, ginidem/v0.1.0, ...) in
## dependency order; refuses a dirty tree or an existing tag; pushes nothing
## (docs/release.md).
.PHONY: release release-check
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 1; }
	cd scripts && GOWORK=off $(GO) run ./release -dir .. -version $(VERSION)

## release-check: the modules of this working tree, as released at $(VERSION),
## served by a file-based module proxy; a new module outside the repository
## go gets seven of them, builds and sends one key twice through Gin.
release-check:
	@test -n "$(VERSION)" || { echo "usage: make release-check VERSION=vX.Y.Z"; exit 1; }
	scripts/release-check $(VERSION)

## deps: rewrite docs/dependencies.md (each module's direct dependencies and
## why; the reasons are written there by hand); deps-check (CI) fails if it is
## stale, a reason is missing, the idem modules are required at more than one
## version, or a package of any module depends on gopkg.in/yaml.v3.
.PHONY: deps deps-check
deps:
	cd scripts && GOWORK=off $(GO) run ./deps -dir ..
deps-check:
	cd scripts && GOWORK=off $(GO) run ./deps -dir .. -check

## proto: regenerate the gRPC code of grpcidem's tests and of examples/grpc
## with protoc (Debian's protobuf-compiler, installed if missing) and the
## pinned protoc-gen-go and protoc-gen-go-grpc (installed into .tools/).
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
.PHONY: proto
proto:
	@command -v protoc >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler; }
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	cd grpcidem && PATH=$(TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative internal/testpb/testpb.proto
	cd examples/grpc && PATH=$(TOOLS):$$PATH protoc -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative proto/idem/examples/orders/v1/orders.proto

## rules: check idemprom's alert rules and run their unit tests with promtool
## (installed into .tools/ if it is not on the PATH).
.PHONY: rules
rules: $(PROMTOOL)
	cd idemprom && $(PROMTOOL) check rules alerts.yml && $(PROMTOOL) test rules alerts_test.yml

fmt:
	gofmt -w .

# promtool and prometheus alone, from Debian's prometheus package: installing
# the package would also start a Prometheus server.
$(TOOLS)/promtool $(TOOLS)/prometheus &:
	@mkdir -p $(TOOLS)/deb
	cd $(TOOLS)/deb && { DEBIAN_FRONTEND=noninteractive apt-get download prometheus 2>/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get download prometheus; }; }
	dpkg-deb --fsys-tarfile $(TOOLS)/deb/prometheus_*.deb | tar -x -C $(TOOLS)/deb ./usr/bin/promtool ./usr/bin/prometheus
	mv $(TOOLS)/deb/usr/bin/promtool $(TOOLS)/deb/usr/bin/prometheus $(TOOLS)/ && rm -rf $(TOOLS)/deb
	$(TOOLS)/promtool --version && $(TOOLS)/prometheus --version

$(STATICCHECK):
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

tools: $(STATICCHECK)

clean:
	rm -rf bin $(TOOLS)
