// Command gubernator runs Gubernator v2's own daemon (gubernator.SpawnDaemon,
// configured from the usual GUBER_* environment) for Borrowcycle's
// fleet-mode tests and examples, with one addition: a static peer list.
//
// Gubernator v2.4.0's member-list discovery binds its gossip port on
// 0.0.0.0:7946 whatever GUBER_MEMBERLIST_ADDRESS says, so two peers cannot
// share one host; the others need etcd, Kubernetes or DNS. With
// GUBER_STATIC_PEERS (a comma-separated list of every peer's gRPC address,
// this one included) the daemon starts without discovery and is given that
// list, which is how Gubernator's own test cluster (package cluster) runs
// several peers in one process. Without it, discovery works as upstream.
package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	gubernator "github.com/mailgun/gubernator/v2"
	"github.com/sirupsen/logrus"
)

// staticDiscovery is a discovery type that SpawnDaemon does not know, so it
// creates no pool; the peers come from GUBER_STATIC_PEERS instead.
const staticDiscovery = "static"

func main() {
	log := logrus.StandardLogger()
	conf, err := gubernator.SetupDaemonConfig(log, nil)
	if err != nil {
		log.WithError(err).Fatal("while getting config")
	}
	peers := staticPeers(os.Getenv("GUBER_STATIC_PEERS"))
	if peers != nil {
		conf.PeerDiscoveryType = staticDiscovery
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	daemon, err := gubernator.SpawnDaemon(ctx, conf)
	cancel()
	if err != nil {
		log.WithError(err).Fatal("while spawning daemon")
	}
	if peers != nil {
		daemon.SetPeers(peers)
	}
	log.Infof("gubernator: ready, http %s, grpc %s, %d static peers", conf.HTTPListenAddress, conf.GRPCListenAddress, len(peers))

	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	<-c
	daemon.Close()
}

// staticPeers parses GUBER_STATIC_PEERS; nil when it is empty. The peer
// whose address is this daemon's GUBER_ADVERTISE_ADDRESS, as written (the
// daemon resolves its own copy to an IP), is this one: it serves its keys
// itself instead of calling itself over gRPC. SetPeers also recognises the
// gRPC listen address.
func staticPeers(list string) []gubernator.PeerInfo {
	self := os.Getenv("GUBER_ADVERTISE_ADDRESS")
	var peers []gubernator.PeerInfo
	for _, addr := range strings.Split(list, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			peers = append(peers, gubernator.PeerInfo{GRPCAddress: addr, IsOwner: addr == self})
		}
	}
	return peers
}
