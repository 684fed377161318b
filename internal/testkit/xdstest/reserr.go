package xdstest

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
)

// ResourceErrors summarizes a response's resource_errors, in order, as
// "CODE:name" (NOT_FOUND:b); it checks nothing. Use it with
// DiscoveryResponse.GetResourceErrors or
// DeltaDiscoveryResponse.GetResourceErrors.
func ResourceErrors(errs []*discoveryv3.ResourceError) []string {
	var out []string
	for _, e := range errs {
		code := codes.Code(e.GetErrorDetail().GetCode()).String()
		switch codes.Code(e.GetErrorDetail().GetCode()) {
		case codes.NotFound:
			code = "NOT_FOUND"
		case codes.PermissionDenied:
			code = "PERMISSION_DENIED"
		}
		msg := ""
		if e.GetErrorDetail().GetMessage() == "" {
			msg = " (no message)"
		}
		out = append(out, code+":"+e.GetResourceName().GetName()+msg)
	}
	return out
}
