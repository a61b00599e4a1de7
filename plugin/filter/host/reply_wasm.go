//go:build wasm

package host

import (
	"errors"
	"strconv"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
)

// send sends r with proxy_send_local_response. It calls the ABI itself,
// not the SDK's SendHttpResponse, because that allocates the serialized
// headers on every rejection; here they go to the reused buffer.
func (s *replier) send(r filter.Reply) error {
	s.buf = appendPairs(s.buf[:0], r.Headers)
	var body *byte
	if len(r.Body) > 0 {
		body = &r.Body[0]
	}
	if st := proxySendLocalResponse(r.Status, nil, 0, body, int32(len(r.Body)), &s.buf[0], int32(len(s.buf)), -1); st != 0 {
		return errors.New("proxy_send_local_response: status " + strconv.FormatUint(uint64(st), 10))
	}
	return nil
}

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(statusCode uint32, detail *byte, detailSize int32,
	body *byte, bodySize int32, headers *byte, headersSize int32, grpcStatus int32) uint32
