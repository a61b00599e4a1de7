package wasmhost

import (
	"errors"
	"github.com/tetratelabs/wazero/api"
	"strconv"
	"strings"
)

// stream is the state of one HTTP stream while the VM processes it.
type stream struct {
	request    [][2]string
	response   [][2]string
	trailers   [][2]string // always empty; the guest may write, nobody reads
	responding bool        // the response headers map exists
	local      *localReply
	continued  bool // proxy_continue_stream(request) was called
}

type localReply struct {
	status  int
	body    string
	headers [][2]string
}

// Result is what the client of one request sees, plus what only the test
// can see.
type Result struct {
	// VM is the worker VM that served the request.
	VM int
	// Local is true when the plugin answered with a local reply instead of
	// letting the request through to the upstream.
	Local bool
	// Status is the response status the client receives.
	Status int
	// Headers are the response headers the client receives: the upstream's
	// (or the local reply's) plus whatever the plugin's response path added.
	Headers [][2]string
	// Body is the local reply's body (an upstream's body is not modelled).
	Body string
	// Upstream holds the request headers as forwarded upstream, after the
	// plugin's changes; nil for a local reply.
	Upstream [][2]string
	// Err is set when the VM failed (trapped, or exited after a panic)
	// during this request or earlier; the client would get Envoy's
	// failure-policy response instead.
	Err error
}

// Continued reports that the request reached the upstream.
func (r Result) Continued() bool { return r.Err == nil && !r.Local }

// Header returns the first response header named name (lower case), or "".
func (r Result) Header(name string) string {
	for _, p := range r.Headers {
		if p[0] == name {
			return p[1]
		}
	}
	return ""
}

// Values returns every response header named name (lower case).
func (r Result) Values(name string) []string {
	var out []string
	for _, p := range r.Headers {
		if p[0] == name {
			out = append(out, p[1])
		}
	}
	return out
}

// ErrPaused is returned for a request the plugin paused without answering
// or resuming it: in Envoy the client would hang until a timeout.
var ErrPaused = errors.New("wasmhost: request paused with neither a local reply nor continue_stream")

// Request returns the headers of a GET to path carrying the client id in
// x-client-id (no header when clientID is empty), shaped like what Envoy's
// HTTP connection manager hands the filter.
func Request(path, clientID string) [][2]string {
	h := [][2]string{{":authority", "example.test"}, {":path", path}, {":method", "GET"}, {":scheme", "http"}}
	if clientID != "" {
		h = append(h, [2]string{"x-client-id", clientID})
	}
	return h
}

// Do runs one request through worker VM vm the way Envoy's filter chain
// does: proxy_on_context_create, proxy_on_request_headers, then the response
// path (proxy_on_response_headers) for the upstream's response or for the
// plugin's own local reply, which in Envoy also goes through the encoder
// filters; finally proxy_on_log, proxy_on_done and proxy_on_delete.
func (h *Host) Do(vm int, headers [][2]string) Result {
	return h.vms[vm].do(headers)
}

func (vm *VM) do(headers [][2]string) Result {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	res := Result{VM: vm.index}
	if vm.failure != nil {
		res.Err = vm.failure
		return res
	}
	st := &stream{request: lowerKeys(append([][2]string(nil), headers...))}
	id := uint64(vm.nextID)
	vm.nextID++
	vm.stream = st
	defer func() { vm.stream = nil }()

	if res.Err = vm.requestPath(st, id); res.Err == nil {
		res.Err = vm.responsePath(st, id, &res)
	}
	if res.Err == nil {
		res.Err = vm.finish(id)
	}
	return res
}

func (vm *VM) requestPath(st *stream, id uint64) error {
	if _, err := vm.call(vm.exports.contextCreate, id, rootContextID); err != nil {
		return err
	}
	action, err := vm.call(vm.exports.requestHeaders, id, uint64(len(st.request)), 1)
	if err != nil {
		return err
	}
	if st.local == nil && action != actionContinue && !st.continued {
		// Finish the stream anyway so the guest does not keep the context.
		_ = vm.finish(id)
		return ErrPaused
	}
	return nil
}

// responsePath builds the response (local reply or upstream) and lets the
// plugin see it, as Envoy's encodeHeaders does.
func (vm *VM) responsePath(st *stream, id uint64, res *Result) error {
	if st.local != nil {
		res.Local = true
		res.Body = st.local.body
		st.response = append([][2]string{{":status", strconv.Itoa(st.local.status)}}, st.local.headers...)
	} else {
		res.Upstream = st.request
		st.response = append([][2]string(nil), vm.host.opts.UpstreamHeaders...)
	}
	st.responding = true
	endOfStream := uint64(1)
	if res.Body != "" {
		endOfStream = 0
	}
	if _, err := vm.call(vm.exports.responseHeaders, id, uint64(len(st.response)), endOfStream); err != nil {
		return err
	}
	res.Headers = st.response
	res.Status, _ = strconv.Atoi(res.Header(":status"))
	return nil
}

// finish ends the stream: access log, then destruction.
func (vm *VM) finish(id uint64) error {
	for _, f := range []api.Function{vm.exports.log, vm.exports.done, vm.exports.delete} {
		if _, err := vm.call(f, id); err != nil {
			return err
		}
	}
	return nil
}

// String renders a result for test failure messages.
func (r Result) String() string {
	var b strings.Builder
	b.WriteString("vm")
	b.WriteString(strconv.Itoa(r.VM))
	if r.Err != nil {
		b.WriteString(" error: ")
		b.WriteString(r.Err.Error())
		return b.String()
	}
	if r.Local {
		b.WriteString(" local")
	}
	b.WriteString(" ")
	b.WriteString(strconv.Itoa(r.Status))
	for _, p := range r.Headers {
		b.WriteString(" ")
		b.WriteString(p[0])
		b.WriteString("=")
		b.WriteString(p[1])
	}
	if r.Body != "" {
		b.WriteString(" body=")
		b.WriteString(strconv.Quote(r.Body))
	}
	return b.String()
}
