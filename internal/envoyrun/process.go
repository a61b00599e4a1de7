package envoyrun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options say how to run one Envoy.
type Options struct {
	// Envoy is the binary.
	Envoy string
	// Bootstrap is rendered with fresh loopback ports by Start.
	Bootstrap *Bootstrap
	// Concurrency is Envoy's worker count (--concurrency).
	Concurrency int
	// Dir receives the rendered config and the log.
	Dir string
	// Name prefixes the files in Dir.
	Name string
	// ReadyTimeout bounds start-up; zero means 60 s.
	ReadyTimeout time.Duration
	// DrainTime, when positive, is Envoy's --drain-time-s (whole seconds,
	// rounded up): how long a listener replaced through LDS keeps serving
	// its connections, and its filters' plugin contexts keep ticking.
	// Zero keeps Envoy's default (600 s).
	DrainTime time.Duration
	// Render, when set, edits the bootstrap once its ports are set and
	// before it is written: the place for edits that need the ports, such
	// as moving a listener to a file-based LDS source.
	Render func(b *Bootstrap, p Ports) error
}

// Envoy is a running Envoy process.
type Envoy struct {
	URL      string // the ingress listener, e.g. http://127.0.0.1:40123
	AdminURL string
	Ports    Ports
	LogPath  string
	Config   string // path of the rendered bootstrap

	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid once done is closed
}

// ErrExited is wrapped by Start when Envoy exits before it is ready, which is
// what a rejected configuration looks like.
var ErrExited = errors.New("envoy exited before it was ready")

// Start renders the bootstrap on free loopback ports and starts Envoy, and
// returns once the admin interface reports it ready. Free ports are found by
// binding port 0 and closing, so another process can take one before Envoy
// binds it; a start that fails that way is retried on new ports.
func Start(ctx context.Context, o Options) (*Envoy, error) {
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		e, err := startOnce(ctx, o, attempt)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "ddress already in use") {
			break
		}
	}
	return nil, lastErr
}

func startOnce(ctx context.Context, o Options, attempt int) (*Envoy, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	p := Ports{Ingress: ports[0], Admin: ports[1], Upstream: ports[2]}
	if err := o.Bootstrap.SetPorts(p); err != nil {
		return nil, err
	}
	if o.Render != nil {
		if err := o.Render(o.Bootstrap, p); err != nil {
			return nil, err
		}
	}
	raw, err := o.Bootstrap.Bytes()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(o.Dir, fmt.Sprintf("%s-%d", o.Name, attempt))
	e := &Envoy{
		URL:      "http://127.0.0.1:" + strconv.Itoa(p.Ingress),
		AdminURL: "http://127.0.0.1:" + strconv.Itoa(p.Admin),
		Ports:    p,
		LogPath:  base + ".log",
		Config:   base + ".yaml",
		done:     make(chan struct{}),
	}
	if err := os.WriteFile(e.Config, raw, 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(e.LogPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor

	concurrency := o.Concurrency
	if concurrency < 1 {
		concurrency = 1
	}
	// --use-dynamic-base-id: Envoys started side by side would otherwise
	// collide on the shared-memory base id of hot restart.
	// --file-flush-interval-msec: the access log (stdout, in the log file)
	// reaches the file within 100 ms instead of Envoy's default 10 s.
	args := []string{"-c", e.Config,
		"--concurrency", strconv.Itoa(concurrency),
		"--use-dynamic-base-id",
		"--file-flush-interval-msec", "100",
		"--log-level", "info",
		"--disable-hot-restart"}
	if o.DrainTime > 0 {
		args = append(args, "--drain-time-s", strconv.Itoa(int((o.DrainTime+time.Second-1)/time.Second)))
	}
	e.cmd = exec.Command(o.Envoy, args...)
	e.cmd.Stdout = logFile
	e.cmd.Stderr = logFile
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Envoy, err)
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.done)
	}()

	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	if err := e.waitReady(ctx, timeout); err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("%w\n--- envoy log %s (last lines) ---\n%s", err, e.LogPath, e.LogTail(40))
	}
	return e, nil
}

// waitReady polls /ready until Envoy has bound its listeners and finished
// initialisation (which includes configuring the Wasm plugin on every
// worker), or exits.
func (e *Envoy) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-e.done:
			return fmt.Errorf("%w (%v)", ErrExited, e.err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(e.AdminURL + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("envoy not ready after %s", timeout)
}

// Wait waits for the process to exit, up to timeout, and returns its exit
// error (nil for status 0).
func (e *Envoy) Wait(timeout time.Duration) (exited bool, err error) {
	select {
	case <-e.done:
		return true, e.err
	case <-time.After(timeout):
		return false, nil
	}
}

// Alive reports whether the process is still running.
func (e *Envoy) Alive() bool {
	select {
	case <-e.done:
		return false
	default:
		return true
	}
}

// Stop asks Envoy to exit and kills it if it does not within 10 s.
func (e *Envoy) Stop() error {
	if !e.Alive() {
		return nil
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	if exited, _ := e.Wait(10 * time.Second); exited {
		return nil
	}
	_ = e.cmd.Process.Kill()
	<-e.done
	return errors.New("envoy did not exit on SIGTERM; killed")
}

// Log returns the whole log.
func (e *Envoy) Log() string {
	raw, _ := os.ReadFile(e.LogPath)
	return string(raw)
}

// startupNoise matches the long lines Envoy prints at start-up about its
// extensions and header maps, which would crowd out the useful ones.
var startupNoise = regexp.MustCompile(`\]\[info\]\[main\] \[source/server/server\.cc:(4|5)\d\d\]`)

// LogTail returns the last n lines of the log, without start-up noise.
func (e *Envoy) LogTail(n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(e.Log(), "\n"), "\n") {
		if !startupNoise.MatchString(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Validate runs `envoy --mode validate` on cfg. Validation builds the
// filters, and for the Wasm filter that includes loading the module and
// running the plugin's configure callback once, so a plugin configuration
// the plugin rejects fails validation too. It returns Envoy's output.
func Validate(ctx context.Context, envoy string, cfg []byte, dir, name string) (string, error) {
	file := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(file, cfg, 0o644); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, envoy, "--mode", "validate", "-c", file,
		"--use-dynamic-base-id", "--disable-hot-restart").CombinedOutput()
	return string(out), err
}

// handedOut are the ports freePorts has returned in this process. Envoys
// started side by side choose their ports in parallel, and a port closed
// by one choice is free again for the next until its Envoy binds it; two
// Envoys given one port both listen on it (SO_REUSEPORT) and split its
// connections. So a port is handed out once per process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePorts returns n distinct loopback ports that were free a moment ago
// and that it never returned before in this process.
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l) // held open until all are chosen, so they differ
		if port := l.Addr().(*net.TCPAddr).Port; !handedOut.ports[port] {
			handedOut.ports[port] = true
			ports = append(ports, port)
		}
	}
	return ports, nil
}
