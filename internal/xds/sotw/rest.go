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
		t, ok := restPaths[r.URL.Path]
		if !ok {
			http.Error(w, "unknown xDS REST endpoint "+r.URL.Path, http.StatusNotFound)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxRESTBody+1))
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(body) > MaxRESTBody {
			http.Error(w, "request body larger than 1 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		req := new(discoveryv3.DiscoveryRequest)
		if err := protojson.Unmarshal(body, req); err != nil {
			msg := strings.ReplaceAll(err.Error(), "\u00a0", " ")
			http.Error(w, "bad DiscoveryRequest: "+msg, http.StatusBadRequest)
			return
		}
		p, err := s.poll(r.Context(), req, t)
		switch {
		case status.Code(err) == codes.InvalidArgument:
			http.Error(w, status.Convert(err).Message(), http.StatusBadRequest)
			return
		case status.Code(err) == codes.ResourceExhausted:
			http.Error(w, status.Convert(err).Message(), http.StatusTooManyRequests)
			return
		case status.Code(err) == codes.Unauthenticated:
			http.Error(w, status.Convert(err).Message(), http.StatusUnauthorized)
			return
		case status.Code(err) == codes.PermissionDenied:
			http.Error(w, status.Convert(err).Message(), http.StatusForbidden)
			return
		case err != nil:
			http.Error(w, status.Convert(err).Message(), http.StatusServiceUnavailable)
			return
		case p == nil:
			w.WriteHeader(http.StatusNotModified)
			return
		}
		// Authorized above: the body may come from the cache.
		out, err := s.rest.get(p.snap.Revision, restKey(p.t, p.group, p.names, p.wildcard, p.keysOK), func() ([]byte, error) {
			return protojson.Marshal(p.response(s.core.ControlPlane, s.core.Metrics))
		})
		if err != nil {
			http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		s.core.Shared.ResponseSize.WithLabelValues("rest", t.Name).Observe(float64(len(out)))
		w.Header().Set("Content-Type", "application/json")
		w.Write(out) //nolint:errcheck // the client went away
	})
}

// RESTPattern is the ServeMux pattern RESTHandler answers under.
const RESTPattern = "/v3/"
