package envoyrun

import (
	"path/filepath"
)

// FleetBootstrapFile is the fleet-mode example bootstrap: envoy/envoy.yaml
// with the Gubernator cluster and a plugin configuration in fleet mode.
const FleetBootstrapFile = "fleet.yaml"

// GubernatorCluster is the name of the Gubernator gateway's cluster in the
// fleet bootstrap.
const GubernatorCluster = "gubernator"

// FleetBootstrap loads envoy/fleet.yaml from the repository.
func FleetBootstrap() (*Bootstrap, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return LoadBootstrap(filepath.Join(root, "envoy", FleetBootstrapFile))
}

// SetClusterEndpoints makes the cluster called name a static one whose
// endpoints are the given ports on 127.0.0.1: tests point the shipped
// cluster at the processes they started.
func (b *Bootstrap) SetClusterEndpoints(name string, ports ...int) error {
	c, err := named(b.root, name, "static_resources", "clusters")
	if err != nil {
		return err
	}
	endpoints := make([]any, len(ports))
	for i, p := range ports {
		endpoints[i] = map[string]any{"endpoint": map[string]any{"address": map[string]any{
			"socket_address": map[string]any{"address": "127.0.0.1", "port_value": p},
		}}}
	}
	c["type"] = "STATIC"
	delete(c, "dns_lookup_family")
	c["load_assignment"] = map[string]any{
		"cluster_name": name,
		"endpoints":    []any{map[string]any{"lb_endpoints": endpoints}},
	}
	return nil
}

// FreePorts returns n distinct loopback ports that were free a moment ago,
// for processes a test starts next to Envoy (such as Gubernator peers).
func FreePorts(n int) ([]int, error) { return freePorts(n) }
