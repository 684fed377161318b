package xdsstream

import (
	"fmt"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/state/xdstp"
)

// Per-resource errors (xRFC TP3, the resource_errors field of
// DiscoveryResponse and DeltaDiscoveryResponse). A name a client
// subscribes to explicitly and is not sent gets a ResourceError saying
// why: NOT_FOUND when no scope the node sees holds it, PERMISSION_DENIED
// when it exists but carries an inline private key the client may not be
// sent (see keys.go). Wildcard subscriptions get none: what they cover is
// the server's choice, and a resource the client may not see is not
// covered (TP3, "Wildcard Subscriptions and Glob Collections").
//
// TP3 asks for no client feature: the field is one clients that do not
// read it skip, so a response carrying errors still carries everything it
// would carry without them (SotW LDS and CDS: every subscribed resource
// that exists). An error is sent once, not with every response: "the xDS
// Management server is only expected to return the error message once
// rather than throughout for future responses. The client is expected to
// remember the error message until either a new error message is
// returned or the resource is returned." A name that is sent is never in
// the same response's errors.

// ResourceErr is one name a response tells the client it is not sent,
// and why.
type ResourceErr struct {
	Name string
	Code codes.Code // codes.NotFound or codes.PermissionDenied
}

// AbsentCode is why a name is not sent: NOT_FOUND when visible, what the
// node's scopes hold under the name, is nil; PERMISSION_DENIED when the
// stream withholds it (Sendable).
func AbsentCode(visible *view.Entry) codes.Code {
	if visible != nil {
		return codes.PermissionDenied
	}
	return codes.NotFound
}

// Told is what a stream told its client of the names of one type it is
// not sent: the code of the last error sent, by name. The zero value is
// empty and holds no map, as does a Told whose errors were all cleared.
// It is owned by the stream's goroutine.
type Told struct {
	m map[string]codes.Code
}

// Add appends to errs the error of name n, not sent for code c, unless
// the client was told exactly that already.
func (t *Told) Add(errs []ResourceErr, n string, c codes.Code) []ResourceErr {
	if told, ok := t.m[n]; ok && told == c {
		return errs
	}
	return append(errs, ResourceErr{Name: n, Code: c})
}

// Sent records errs as told: the client remembers them until it is sent
// the resource or another error.
func (t *Told) Sent(errs []ResourceErr) {
	if len(errs) == 0 {
		return
	}
	if t.m == nil {
		t.m = make(map[string]codes.Code, len(errs))
	}
	for _, e := range errs {
		t.m[e.Name] = e.Code
	}
}

// Forget drops name n: it was sent, or unsubscribed (subscribing it
// again asks again).
func (t *Told) Forget(n string) {
	if t.m == nil {
		return
	}
	delete(t.m, n)
	if len(t.m) == 0 {
		t.m = nil
	}
}

// Keep forgets every name has does not report.
func (t *Told) Keep(has func(string) bool) {
	for n := range t.m {
		if !has(n) {
			delete(t.m, n)
		}
	}
	if len(t.m) == 0 {
		t.m = nil
	}
}

// Len is the number of names told.
func (t *Told) Len() int { return len(t.m) }

// ResourceErrors is the resource_errors field carrying errs, names of
// type t, from a server serving auth. The messages depend only on the
// type, the name, the code and the server's authorities, so that a body
// carrying them is shared like any other (AppendErrorsKey).
func ResourceErrors(t *resource.Type, errs []ResourceErr, auth xdstp.Authorities) []*discoveryv3.ResourceError {
	if len(errs) == 0 {
		return nil
	}
	out := make([]*discoveryv3.ResourceError, len(errs))
	for i, e := range errs {
		out[i] = &discoveryv3.ResourceError{
			ResourceName: &discoveryv3.ResourceName{Name: e.Name},
			ErrorDetail:  &rpcstatus.Status{Code: int32(e.Code), Message: errorMessage(t, e, auth)},
		}
	}
	return out
}

func errorMessage(t *resource.Type, e ResourceErr, auth xdstp.Authorities) string {
	if e.Code == codes.PermissionDenied {
		return fmt.Sprintf("%s %q carries an inline private key, and this client may not be sent the secrets of its scope", t.Name, e.Name)
	}
	notFound := fmt.Sprintf("no %s named %q in the scopes this node sees", t.Name, e.Name)
	if !xdstp.IsXDSTP(e.Name) {
		return notFound
	}
	n, err := xdstp.Parse(e.Name)
	switch {
	case err != nil:
		return fmt.Sprintf("%s %q: not a valid xdstp name, so no resource has it", t.Name, e.Name)
	case !auth.ServesAuthority(n.Authority):
		served := "none but the empty one"
		if names := auth.Names(); len(names) > 0 {
			served = strings.Join(names, ", ")
		}
		return fmt.Sprintf("%s %q: authority %q is not one this server serves (%s); the client's bootstrap should send it to the server of that authority", t.Name, e.Name, n.Authority, served)
	case n.Type != t.MessageName():
		return fmt.Sprintf("%s %q: its type segment %q is not %q, the message of a %s", t.Name, e.Name, n.Type, t.MessageName(), t.Name)
	}
	return notFound
}

// AppendErrorsKey appends errs' part of a body key to b: "\x00!" and,
// per error, "\x00<code>/<name>". A key names everything its body
// carries, so two streams share a body only when they are sent the same
// errors.
func AppendErrorsKey(b []byte, errs []ResourceErr) []byte {
	if len(errs) == 0 {
		return b
	}
	b = append(b, "\x00!"...)
	for _, e := range errs {
		b = append(b, 0, byte('0'+e.Code%10), byte('0'+e.Code/10), '/')
		b = append(b, e.Name...)
	}
	return b
}

// CountErrors counts errs, sent in a response of type t.
func (s *Stream[T]) CountErrors(t *resource.Type, errs []ResourceErr) {
	for _, e := range errs {
		s.core.Metrics.ResourceErrors.WithLabelValues(t.Name, codeLabel(e.Code)).Inc()
	}
}

// codeLabel is the code label of a resource error: the status code's
// name, as gRPC writes it.
func codeLabel(c codes.Code) string {
	if c == codes.PermissionDenied {
		return "PERMISSION_DENIED"
	}
	return "NOT_FOUND"
}
