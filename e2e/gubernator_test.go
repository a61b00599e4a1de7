package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// A Gubernator cluster on loopback for the fleet-mode tests: the binary
// make builds from tools/gubernator (Gubernator v2.13.0's daemon with static
// peers), BORROWCYCLE_GUBERNATOR. Like Envoy, a missing binary skips the
// tests, or fails them under BORROWCYCLE_REQUIRE_ENVOY=1.

// needGubernator returns the Gubernator binary, or skips (fails in CI).
func needGubernator(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("BORROWCYCLE_GUBERNATOR")
	reason := ""
	if bin == "" {
		reason = "BORROWCYCLE_GUBERNATOR is not set (make test-e2e sets build/gubernator; make gubernator builds it)"
	} else if _, err := os.Stat(bin); err != nil {
		reason = fmt.Sprintf("BORROWCYCLE_GUBERNATOR=%s: %v (run make gubernator)", bin, err)
	}
	if reason != "" {
		if setup.require {
			t.Fatalf("Gubernator unavailable and BORROWCYCLE_REQUIRE_ENVOY=1: %s", reason)
		}
		t.Skipf("SKIP (no Gubernator): %s", reason)
	}
	return bin
}

// gubernatorCluster is n peers that know each other.
type gubernatorCluster struct {
	t     *testing.T
	bin   string
	dir   string
	peers []*gubernatorPeer
}

type gubernatorPeer struct {
	http, grpc int
	cmd        *exec.Cmd
	done       chan struct{}
	starts     int
}

// startGubernator starts an n-peer cluster and waits until every peer
// answers for keys any peer owns.
func startGubernator(t *testing.T, n int) *gubernatorCluster {
	t.Helper()
	c := &gubernatorCluster{t: t, bin: needGubernator(t), dir: logDir(t)}
	ports, err := envoyrun.FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		c.peers = append(c.peers, &gubernatorPeer{http: ports[2*i], grpc: ports[2*i+1]})
	}
	t.Cleanup(func() {
		for i := range c.peers {
			c.stop(i)
		}
	})
	for i := range c.peers {
		c.start(i)
	}
	c.waitReady()
	return c
}

// httpPorts are the peers' gateway ports, the Envoy cluster's endpoints.
func (c *gubernatorCluster) httpPorts() []int {
	out := make([]int, len(c.peers))
	for i, p := range c.peers {
		out[i] = p.http
	}
	return out
}

// start (re)starts peer i on its ports. A restarted peer has forgotten
// every count, as a real one does.
func (c *gubernatorCluster) start(i int) {
	c.t.Helper()
	p := c.peers[i]
	var grpcs []string
	for _, q := range c.peers {
		grpcs = append(grpcs, "127.0.0.1:"+strconv.Itoa(q.grpc))
	}
	p.starts++
	logPath := filepath.Join(c.dir, fmt.Sprintf("gubernator-%d-%d.log", i, p.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(c.bin)
	cmd.Env = append(os.Environ(),
		"GUBER_GRPC_ADDRESS=127.0.0.1:"+strconv.Itoa(p.grpc),
		"GUBER_HTTP_ADDRESS=127.0.0.1:"+strconv.Itoa(p.http),
		"GUBER_STATIC_PEERS="+strings.Join(grpcs, ","),
		"OTEL_TRACES_EXPORTER=none",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start gubernator: %v", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.done)
}

// stop kills peer i (no graceful hand-over: a crash is what fleet mode
// must survive) and waits for it to exit.
func (c *gubernatorCluster) stop(i int) {
	p := c.peers[i]
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// pause stops peer i with SIGSTOP, as a host that stalls: its sockets stay
// open, so callers connect and then wait for an answer that does not come
// until resume continues it.
func (c *gubernatorCluster) pause(i int) {
	c.t.Helper()
	p := c.peers[i]
	if p.cmd == nil {
		c.t.Fatalf("pause: gubernator peer %d is not running", i)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("pause gubernator peer %d: %v", i, err)
	}
}

// resume continues peer i after pause (nothing when it runs already).
func (c *gubernatorCluster) resume(i int) {
	c.t.Helper()
	p := c.peers[i]
	if p.cmd == nil {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		select {
		case <-p.done:
		default:
			c.t.Fatalf("resume gubernator peer %d: %v", i, err)
		}
	}
}

// exited reports whether peer i's process, started and not stopped by
// stop, has exited on its own.
func (c *gubernatorCluster) exited(i int) bool {
	p := c.peers[i]
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail is at most n bytes of peer i's log since its latest start: from
// its first panic if it has one, else its end.
func (c *gubernatorCluster) logTail(i int, n int) string {
	p := c.peers[i]
	b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("gubernator-%d-%d.log", i, p.starts)))
	if err != nil {
		return err.Error()
	}
	if at := bytes.Index(b, []byte("panic:")); at >= 0 {
		b = b[at:]
	} else if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b[:min(len(b), n)])
}

// waitReady polls every running peer until each answers a probe of 16
// keys (spread over every owner) without an error.
func (c *gubernatorCluster) waitReady() {
	c.t.Helper()
	var reqs []string
	for k := 0; k < 16; k++ {
		reqs = append(reqs, fmt.Sprintf(`{"name":"probe","unique_key":"k%d","hits":0,"limit":1,"duration":1000}`, k))
	}
	body := []byte(`{"requests":[` + strings.Join(reqs, ",") + `]}`)
	deadline := time.Now().Add(30 * time.Second)
	for i, p := range c.peers {
		if p.cmd == nil {
			continue
		}
		for {
			ans, err := postGubernator(p.http, body)
			if err == nil && strings.Count(ans, `"error":""`) == 16 {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("gubernator peer %d not ready: %v %.300s", i, err, ans)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func postGubernator(port int, body []byte) (string, error) {
	return postGubernatorWithin(port, body, 2*time.Second)
}

// postGubernatorWithin is postGubernator giving up after timeout, as the
// filter gives up a callout after its fleet.timeout.
func postGubernatorWithin(port int, body []byte, timeout time.Duration) (string, error) {
	cl := &http.Client{Timeout: timeout}
	resp, err := cl.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/v1/GetRateLimits", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), err
}
