package resource

import (
	"fmt"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/xdstp"
)

// checkCollections checks the LEDS collections a ClusterLoadAssignment
// names: each leds_collection_name must be an xdstp:// glob collection
// (xRFC TP1, ".../*") of LbEndpoints, the only form Envoy subscribes to
// and Legation serves. Other resources pass.
func checkCollections(m proto.Message) error {
	cla, ok := m.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return nil
	}
	for i, l := range cla.GetEndpoints() {
		leds := l.GetLedsClusterLocalityConfig()
		if leds == nil {
			continue
		}
		name := leds.GetLedsCollectionName()
		path := fmt.Sprintf("endpoints[%d].leds_cluster_locality_config.leds_collection_name", i)
		n, err := xdstp.Parse(name)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", path, err)
		case !n.Glob:
			return fmt.Errorf("%s: %q is not a glob collection: it must end in /*", path, name)
		case n.Type != LbEndpoint.MessageName():
			return fmt.Errorf("%s: %q: its type segment %q is not %q", path, name, n.Type, LbEndpoint.MessageName())
		}
	}
	return nil
}
