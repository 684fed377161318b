package xdstest

import (
	"runtime"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/tools/procstat"
)

// The measuring tools of the fan-out benchmarks (BenchmarkFanout,
// BenchmarkIdleStreamMemory, BenchmarkDeltaPush and
// BenchmarkSotWPushSameChange): a Mark of time, allocations and CPU at a
// point, and allocation profiles split by whose code allocated.

// Mark is a point of a measured window: when, the allocations so far and
// the process's CPU time.
type Mark struct {
	At  time.Time
	Mem runtime.MemStats
	// CPU is the process's user and system time (zero where getrusage is
	// not available).
	CPU time.Duration
}

// MarkNow reads a Mark. It stops the world briefly (ReadMemStats).
func MarkNow() Mark {
	var m Mark
	m.At = time.Now()
	runtime.ReadMemStats(&m.Mem)
	m.CPU = procstat.CPU()
	return m
}

// SettledMemStats runs two garbage collections (the first may leave
// finalizer-held objects for the second) and reads the memory statistics.
func SettledMemStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// Owner is whose code made an allocation or runs a goroutine.
type Owner int

const (
	// OwnedByOther is etcd, the view, the runtime, the benchmark itself.
	OwnedByOther Owner = iota
	// OwnedByServer is the xDS server's code and grpc-go's server side.
	OwnedByServer
	// OwnedByClient is the benchmark's clients and grpc-go's client side.
	OwnedByClient
)

// OwnerFunc tells by its functions whose code a stack (innermost frame
// first, as runtime records them) is.
type OwnerFunc func(stack []uintptr) Owner

// AllocProfile is runtime.MemProfile summed by stack.
type AllocProfile map[[32]uintptr]runtime.MemProfileRecord

// ReadAllocProfile runs one garbage collection, which publishes the
// allocations made so far, and reads the allocation profile. Allocations
// are profiled one in runtime.MemProfileRate bytes: set it to 1 for exact
// counts. One GC only: sync.Pools keep their contents through one (in
// their victim caches), so grpc-go's buffer pools stay warm.
func ReadAllocProfile() AllocProfile {
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+100)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	p := make(AllocProfile, len(recs))
	for _, r := range recs {
		sum := p[r.Stack0]
		sum.Stack0 = r.Stack0
		sum.AllocBytes += r.AllocBytes
		sum.AllocObjects += r.AllocObjects
		sum.FreeBytes += r.FreeBytes
		sum.FreeObjects += r.FreeObjects
		p[r.Stack0] = sum
	}
	return p
}

// AllocSum is what one owner allocated (or holds).
type AllocSum struct{ Bytes, Objects int64 }

// Since returns, by owner, what was allocated after prev was read.
func (p AllocProfile) Since(prev AllocProfile, owner OwnerFunc) map[Owner]AllocSum {
	out := map[Owner]AllocSum{}
	for k, r := range p {
		o := owner(r.Stack())
		s := out[o]
		s.Bytes += r.AllocBytes - prev[k].AllocBytes
		s.Objects += r.AllocObjects - prev[k].AllocObjects
		out[o] = s
	}
	return out
}

// InUseSince returns, by owner, the growth of the memory in use since
// prev was read.
func (p AllocProfile) InUseSince(prev AllocProfile, owner OwnerFunc) map[Owner]AllocSum {
	out := map[Owner]AllocSum{}
	for k, r := range p {
		o := owner(r.Stack())
		s := out[o]
		q := prev[k]
		s.Bytes += (r.AllocBytes - r.FreeBytes) - (q.AllocBytes - q.FreeBytes)
		s.Objects += (r.AllocObjects - r.FreeObjects) - (q.AllocObjects - q.FreeObjects)
		out[o] = s
	}
	return out
}

// GoroutinesByOwner counts the goroutines by whose code they run; a
// goroutine's stack ends with the function that started it.
func GoroutinesByOwner(owner OwnerFunc) map[Owner]int {
	var recs []runtime.StackRecord
	n, _ := runtime.GoroutineProfile(nil)
	for {
		recs = make([]runtime.StackRecord, n+100)
		var ok bool
		if n, ok = runtime.GoroutineProfile(recs); ok {
			recs = recs[:n]
			break
		}
	}
	out := map[Owner]int{}
	for _, r := range recs {
		out[owner(r.Stack())]++
	}
	return out
}

// pushOwnerOf tells by its functions whose code an allocation's stack is.
// etcd's code anywhere makes it etcd's. Otherwise a frame of the server
// packages anywhere makes it the server's, even when the allocating
// function is the store's (a snapshot lookup the server makes); the view
// applying the change runs in its own goroutine, so its stacks hold no
// server frame. grpc-go's transports are told apart by side, not by
// whose they are: the per-push etcd write crosses etcd's gRPC server
// transport (its header decoding, a few hundred bytes per push, counts as
// the server's: under 10 B per stream) and the benchmark's etcd client
// transport (counted as the clients', which are not reported).
func pushOwnerOf(stack []uintptr) Owner {
	server, client := false, false
	frames := runtime.CallersFrames(stack)
	for more := true; more; {
		var fr runtime.Frame
		fr, more = frames.Next()
		fn := fr.Function
		switch {
		case strings.HasPrefix(fn, "go.etcd.io/"):
			return OwnedByOther
		case strings.HasPrefix(fn, "github.com/legation-io/legation/internal/xds/delta."),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/xds/sotw."),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/xds/xdsstream."),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/xds/wire."),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/state/scope."),
			strings.Contains(fn, "grpc/internal/transport.(*http2Server)"),
			strings.Contains(fn, "grpc/internal/transport.NewServerTransport"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*Server)"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*serverStream)"):
			server = true
		case memoryClient(fn),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/testkit/xdstest.(*pushFixture)"),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/testkit/xdstest.pushCodec"),
			strings.HasPrefix(fn, "github.com/legation-io/legation/internal/testkit/xdstest.(*pushMsg)"),
			strings.Contains(fn, "grpc/internal/transport.(*http2Client)"),
			strings.Contains(fn, "grpc/internal/transport.NewHTTP2Client"),
			strings.Contains(fn, "grpc/internal/transport.newHTTP2Client"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*clientStream)"),
			strings.HasPrefix(fn, "google.golang.org/grpc.newClientStream"),
			strings.HasPrefix(fn, "google.golang.org/grpc.(*csAttempt)"):
			client = true
		}
	}
	switch {
	case server:
		return OwnedByServer
	case client:
		return OwnedByClient
	}
	return OwnedByOther
}
