package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Gubernator side of a stalled peer: a peer that forwards a key to its
// owner must survive callers that give up while the owner does not answer.
// Gubernator v2.4.0 did not: once the caller's context was done, its
// forwarding loop retried six times and then built its error from a nil
// error (gubernator.go:334), and the panic killed the peer, so one stalled
// peer took down the one in front of the filter. The Envoy side (what the
// filter does meanwhile) is in fleet_test.go.

// stallTimeout is how long each caller waits, as a filter's fleet.timeout.
const stallTimeout = 200 * time.Millisecond

// stallLimit is the limit of the test's key: far more than the calls can
// take, since a hit whose caller gave up may still be applied, and more
// than once (peer 1 queues it again on each of its retries).
const stallLimit = 1000

// rateLimitBody is a GetRateLimits request of hits on one key.
func rateLimitBody(key string, hits int) []byte {
	return []byte(fmt.Sprintf(`{"requests":[{"name":"stall","unique_key":%q,"hits":%d,"limit":%d,"duration":60000}]}`, key, hits, stallLimit))
}

// keyOwnedBy finds a key that peer via forwards to peer owner: an answer
// that a peer got from another carries that peer's gRPC address as
// metadata "owner" (a key the peer serves itself has none). The probes
// have hits 0, so they consume nothing. The keys differ in their first
// bytes: Gubernator's default picker hashes with FNV-1, so keys that
// differ only in their last bytes hash close together and tend to have
// one owner (all of "stall-0" to "stall-63" did, on some ports).
func (c *gubernatorCluster) keyOwnedBy(owner, via int) string {
	c.t.Helper()
	mark := `"owner":"127.0.0.1:` + strconv.Itoa(c.peers[owner].grpc) + `"`
	for k := 0; k < 64; k++ {
		key := strconv.Itoa(k) + "/stall"
		ans, err := postGubernator(c.peers[via].http, rateLimitBody(key, 0))
		if err != nil {
			c.t.Fatalf("probe %s through peer %d: %v %.300s", key, via, err, ans)
		}
		if strings.Contains(ans, mark) {
			return key
		}
	}
	c.t.Fatalf("no key of 64 is forwarded by peer %d to peer %d (%s)", via, owner, mark)
	return ""
}

func TestGubernatorStallOwner(t *testing.T) {
	c := startGubernator(t, 2)
	key := c.keyOwnedBy(0, 1)
	t.Logf("key %q: peer 1 forwards it to peer 0", key)

	c.pause(0)
	t.Cleanup(func() { c.resume(0) })
	const calls = 5
	timeouts := 0
	for i := 0; i < calls; i++ {
		ans, err := postGubernatorWithin(c.peers[1].http, rateLimitBody(key, 1), stallTimeout)
		if err == nil && strings.Contains(ans, `"error":""`) {
			t.Fatalf("call %d: an answer for a key whose owner is stopped: %s", i, ans)
		}
		if err != nil && strings.Contains(err.Error(), "Client.Timeout") {
			timeouts++
		}
		if c.exited(1) {
			break
		}
	}
	// The callers are gone; peer 1 is still forwarding (its batches give up
	// after GUBER_BATCH_TIMEOUT, 500 ms by default). Give it time to fail.
	time.Sleep(time.Second)
	if c.exited(1) {
		t.Fatalf("peer 1 exited while its callers gave up on a key owned by the stopped peer 0:\n%s", c.logTail(1, 3000))
	}
	if timeouts == 0 {
		t.Fatalf("no call timed out after %v: the owner's stall was not seen", stallTimeout)
	}
	c.resume(0)

	// Both peers answer again, for keys either owns, and peer 1 still
	// forwards the key to peer 0.
	c.waitReady()
	for i := range c.peers {
		if c.exited(i) {
			t.Fatalf("peer %d exited:\n%s", i, c.logTail(i, 3000))
		}
	}
	mark := `"owner":"127.0.0.1:` + strconv.Itoa(c.peers[0].grpc) + `"`
	ans, err := postGubernator(c.peers[1].http, rateLimitBody(key, 1))
	if err != nil || !strings.Contains(ans, `"error":""`) || !strings.Contains(ans, `"status":"UNDER_LIMIT"`) || !strings.Contains(ans, mark) {
		t.Fatalf("after resume, key %s through peer 1: %v %s", key, err, ans)
	}
	t.Logf("after resume, through peer 1: %s", ans)
	if m := remainingRe.FindStringSubmatch(ans); m != nil {
		rem, _ := strconv.Atoi(m[1])
		t.Logf("the %d calls that timed out took %d units (limit %d, then one hit of 1)", calls, stallLimit-1-rem, stallLimit)
	}
}

var remainingRe = regexp.MustCompile(`"remaining":"(\d+)"`)
