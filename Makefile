# Legation. `make test` is the one command CI runs (see .ci/run).

GO           ?= go
# RACE is passed to `go test` in `test`; `make test RACE=` runs without the
# race detector (it needs cgo and a C compiler).
RACE         ?= -race
# Fuzz targets run briefly by `test`, each as PKG:FuzzName.
FUZZ_TARGETS ?= ./internal/resource:FuzzDecode ./internal/store:FuzzDecodeValue ./internal/store:FuzzParseLeaseMarker ./internal/ads:FuzzRESTRequest ./internal/ads:FuzzStreamRequests ./internal/node:FuzzDeltaEquivalence
FUZZTIME     ?= 10s

# Debian packages `setup` installs when what they provide is missing.
APT_PROTOC  := protobuf-compiler
APT_HAPROXY := haproxy
APT_CC      := gcc libc6-dev

.PHONY: all build run test check-proto vet fmt-check unit fuzz e2e bench lint \
	staticcheck proto tidy setup clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

# Dev mode: an embedded etcd in ./legation-data, xDS on :18000.
run: build
	./bin/xds-node

test: setup tidy check-proto vet fmt-check staticcheck unit fuzz

# What needs setup depends on it, so `make -j test` keeps the order.
check-proto: setup
	./hack/check-proto.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then \
		echo "these files need gofmt -w:"; echo "$$out"; exit 1; \
	fi

unit: setup
	$(GO) test $(RACE) -count=1 -timeout 20m ./...

fuzz: setup
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; \
		echo "fuzz $$pkg $$fn for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1x "$$pkg"; \
	done

e2e: setup
	$(GO) test -count=1 -timeout 60m -tags e2e ./e2e/...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint: fmt-check vet staticcheck

staticcheck:
	$(GO) tool staticcheck ./...

# Regenerates proto/ in place; commit the result (check-proto fails otherwise).
proto:
	./proto/gen.sh

# Fails, showing the diff, when go.mod or go.sum are not tidy.
tidy:
	$(GO) mod tidy -diff

# Installs what the tests need from Debian when it is missing: protoc (and
# the well-known .proto files), haproxy, and a C compiler for -race.
setup:
	@set -e; need=""; \
	command -v protoc >/dev/null 2>&1 || need="$$need $(APT_PROTOC)"; \
	[ -f /usr/include/google/protobuf/any.proto ] || need="$$need libprotobuf-dev"; \
	command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need="$$need $(APT_HAPROXY)"; \
	if [ -n "$(RACE)" ] && ! command -v gcc >/dev/null 2>&1; then need="$$need $(APT_CC)"; fi; \
	if [ -z "$$need" ]; then echo "setup: nothing to install"; exit 0; fi; \
	sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	echo "setup: installing$$need"; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need

clean:
	rm -rf bin
