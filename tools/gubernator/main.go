// Command gubernator runs Gubernator v2's own daemon (gubernator.SpawnDaemon
// from github.com/gubernator-io/gubernator/v2, configured from the usual
// GUBER_* environment) for Borrowcycle's fleet-mode tests and examples, with
// one addition: a static peer list.
//
// GUBER_STATIC_PEERS is a comma-separated list of every peer's gRPC address,
// this one included. With it the daemon starts with discovery type "none"
// and is given that list, less the peers that do not accept connections
// (followLiveness). Without it, discovery works as upstream.
//
// The list is still needed for several peers on one host. Gubernator
// v2.13.0's member-list discovery does bind its gossip port where
// GUBER_MEMBERLIST_BIND_ADDRESS says, but it names every node after the
// host name, so two peers on one host reject each other ("Conflicting
// address"), and no variable sets another name. Even with distinct names,
// it keeps one peer per IP address, so two peers on 127.0.0.1 replace each
// other in the peer list. The other kinds of discovery need etcd,
// Kubernetes or DNS.
package main

import (
	"context"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

func main() {
	log := logrus.StandardLogger()
	conf, err := gubernator.SetupDaemonConfig(log, nil)
	if err != nil {
		log.WithError(err).Fatal("while getting config")
	}
	peers := staticPeers(os.Getenv("GUBER_STATIC_PEERS"))
	if peers != nil {
		conf.PeerDiscoveryType = "none"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	daemon, err := gubernator.SpawnDaemon(ctx, conf)
	cancel()
	if err != nil {
		log.WithError(err).Fatal("while spawning daemon")
	}
	done := make(chan struct{})
	if peers != nil {
		daemon.SetPeers(peers)
		go followLiveness(log, daemon, peers, done)
	}
	log.Infof("gubernator: ready, http %s, grpc %s, %d static peers", conf.HTTPListenAddress, conf.GRPCListenAddress, len(peers))

	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	<-c
	close(done)
	daemon.Close()
}

// probeEvery is how often the static peers are probed.
const probeEvery = 500 * time.Millisecond

// followLiveness keeps the daemon's peer list to the static peers that
// accept a connection on their gRPC port, probed every probeEvery, as a
// discovery service (Kubernetes endpoints, etcd, member-list) drops a dead
// peer: the keys it owned move to the others, which answer for them from
// a fresh count. A peer that is stopped but not dead (SIGSTOP) still
// accepts connections, and stays. Each change is logged.
func followLiveness(log *logrus.Logger, daemon *gubernator.Daemon, all []gubernator.PeerInfo, done <-chan struct{}) {
	alive := make([]bool, len(all))
	for i := range alive {
		alive[i] = true
	}
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		changed := false
		for i, p := range all {
			conn, err := net.DialTimeout("tcp", p.GRPCAddress, probeEvery/2)
			up := err == nil
			if up {
				conn.Close()
			}
			if up != alive[i] {
				alive[i], changed = up, true
				log.Infof("gubernator: static peer %s is %s", p.GRPCAddress, map[bool]string{true: "up", false: "down"}[up])
			}
		}
		if changed {
			var live []gubernator.PeerInfo
			for i, p := range all {
				if alive[i] {
					live = append(live, p)
				}
			}
			daemon.SetPeers(live)
		}
	}
}

// staticPeers parses GUBER_STATIC_PEERS; nil when it is empty. The peer
// whose address is this daemon's GUBER_ADVERTISE_ADDRESS, as written, is
// this one: it serves its keys itself instead of calling itself over gRPC.
// (SetPeers also recognises the advertise address once resolved to an IP,
// which is the gRPC listen address when GUBER_ADVERTISE_ADDRESS is unset.)
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
