package sotw

import (
	"io"
	"net/http"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/legation-io/legation/internal/state/resource"
)

// MaxRESTBody bounds a REST-JSON request body.
const MaxRESTBody = 1 << 20

// restPaths maps the REST-JSON endpoints (xds-api-endpoints.txt) to types.
var restPaths = map[string]*resource.Type{
	"/v3/discovery:clusters":          resource.Cluster,
	"/v3/discovery:endpoints":         resource.Endpoint,
	"/v3/discovery:listeners":         resource.Listener,
	"/v3/discovery:routes":            resource.Route,
	"/v3/discovery:scoped-routes":     resource.ScopedRoute,
	"/v3/discovery:secrets":           resource.Secret,
	"/v3/discovery:runtime":           resource.Runtime,
	"/v3/discovery:extension_configs": resource.ExtensionConfig,
}

// RESTHandler serves REST-JSON polling: POST /v3/discovery:TYPE with a
// DiscoveryRequest in proto3 JSON. 200 with a DiscoveryResponse; 304 with
// no body when the request's version_info is current; 400 for a bad body
// (a name longer than --max-name-length, a node id longer than
// --max-node-id-length); 429 for more names than --max-names;
// 401 for a client that did not authenticate and 403 for one claiming a
// node, group or secret it may not (Config.Authorizer); 404 for an
// unknown path; 405 for another method; 503 when this replica
// cannot answer (not loaded, or behind the version presented).
func (s *Server) RESTHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, req, ok := readREST(w, r)
		if !ok {
			return
		}
		p, err := s.poll(r.Context(), req, t)
		if err != nil {
			http.Error(w, status.Convert(err).Message(), restErrorCode(err))
			return
		}
		if p == nil {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		s.writeREST(w, p)
	})
}

// readREST reads a REST-JSON poll: the type its path names and the
// DiscoveryRequest of its body. When the poll is not one (an unknown
// path, another method, a body too large or not a DiscoveryRequest), it
// answers it with the error and ok is false.
func readREST(w http.ResponseWriter, r *http.Request) (t *resource.Type, req *discoveryv3.DiscoveryRequest, ok bool) {
	t, ok = restPaths[r.URL.Path]
	if !ok {
		http.Error(w, "unknown xDS REST endpoint "+r.URL.Path, http.StatusNotFound)
		return nil, nil, false
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return nil, nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRESTBody+1))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return nil, nil, false
	}
	if len(body) > MaxRESTBody {
		http.Error(w, "request body larger than 1 MiB", http.StatusRequestEntityTooLarge)
		return nil, nil, false
	}
	req = new(discoveryv3.DiscoveryRequest)
	if err := protojson.Unmarshal(body, req); err != nil {
		msg := strings.ReplaceAll(err.Error(), "\u00a0", " ")
		http.Error(w, "bad DiscoveryRequest: "+msg, http.StatusBadRequest)
		return nil, nil, false
	}
	return t, req, true
}

// restErrorCode is the HTTP status of a poll refused with err: 400 for a
// bad request, 429 for one over a bound, 401 and 403 for one the
// Authorizer refused, else 503 (this replica cannot answer).
func restErrorCode(err error) int {
	switch status.Code(err) {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	default:
		return http.StatusServiceUnavailable
	}
}

// writeREST answers an authorized poll with its DiscoveryResponse, from
// the cache of the bodies of the revision polled.
func (s *Server) writeREST(w http.ResponseWriter, p *polled) {
	out, err := s.rest.get(p.snap.Revision, restKey(p.t, string(p.chain), p.names, p.wildcard, p.keysOK), func() ([]byte, error) {
		return protojson.Marshal(p.response(s.core.ControlPlane, s.core.Metrics))
	})
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	s.core.Shared.ResponseSize.WithLabelValues("rest", p.t.Name).Observe(float64(len(out)))
	w.Header().Set("Content-Type", "application/json")
	w.Write(out) //nolint:errcheck // the client went away
}

// RESTPattern is the ServeMux pattern RESTHandler answers under.
const RESTPattern = "/v3/"
