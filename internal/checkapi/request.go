package checkapi

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"sync"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
)

// Reading a check without reflection: the body is read into a pooled
// buffer and parsed by parseCheck, which handles what gateways send (an
// object of the known fields, plain strings, integer costs, all valid).
// Anything else — escapes, non-ASCII, null, unknown or repeated fields,
// fractions, invalid values, an oversized body — goes through
// httpx.Decode on the same bytes, so the answers to odd or bad requests
// (400, 413, 422 and their messages) are exactly the standard decoder's.

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// decodeCheck reads r's check request, its resource normalised
// (NormalizeResource) as every doorway's is.
func decodeCheck(r *http.Request) (enforce.Request, error) {
	req, err := decodeCheckBody(r)
	req.Resource = NormalizeResource(req.Resource)
	return req, err
}

// decodeCheckBody reads r's check request as sent.
func decodeCheckBody(r *http.Request) (enforce.Request, error) {
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	body, complete := readBody(r.Body, (*bp)[:0])
	*bp = body[:0]
	if complete {
		if req, ok := parseCheck(body); ok {
			return req, nil
		}
	}
	// The standard way, on what was read and whatever is left.
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	var c checkRequest
	if err := httpx.Decode(r, MaxCheckBody, &c); err != nil {
		return enforce.Request{}, err
	}
	return c.toRequest(), nil
}

// readBody appends up to MaxCheckBody+1 bytes of body to buf; complete is
// true when the body ended within MaxCheckBody bytes without an error.
func readBody(body io.Reader, buf []byte) (_ []byte, complete bool) {
	for len(buf) <= MaxCheckBody {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), MaxCheckBody+1)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, len(buf) <= MaxCheckBody
		}
		if err != nil {
			return buf, false
		}
	}
	return buf, false
}

// Fields of a check request, as bits of what parseCheck has seen.
const (
	fieldKey = 1 << iota
	fieldIP
	fieldResource
	fieldCost
	fieldDryRun
	fieldAutoHold
)

// parseCheck parses and validates the common form of a check request;
// ok is false for anything else (which the standard decoder then handles,
// accepting or refusing it).
func parseCheck(body []byte) (req enforce.Request, ok bool) {
	p := parser{b: body}
	p.space()
	if !p.byte('{') {
		return req, false
	}
	// The strings point into one copy of the body.
	text := string(body)
	req = enforce.Request{Resource: "*", Cost: 1}
	seen := 0
	p.space()
	if p.byte('}') {
		return req, false // neither key nor ip
	}
	for {
		p.space()
		name, ok := p.str()
		if !ok {
			return req, false
		}
		p.space()
		if !p.byte(':') {
			return req, false
		}
		p.space()
		var field int
		switch string(body[name[0]:name[1]]) {
		case "key":
			field = fieldKey
		case "ip":
			field = fieldIP
		case "resource":
			field = fieldResource
		case "cost":
			field = fieldCost
		case "dry_run":
			field = fieldDryRun
		case "auto_hold":
			field = fieldAutoHold
		default:
			return req, false
		}
		if seen&field != 0 {
			return req, false
		}
		seen |= field
		switch field {
		case fieldKey, fieldIP, fieldResource:
			v, ok := p.str()
			if !ok || v[0] == v[1] {
				return req, false
			}
			s := text[v[0]:v[1]]
			switch field {
			case fieldKey:
				req.Key = s
			case fieldIP:
				if req.IP, ok = canonicalIP(s); !ok {
					return req, false
				}
			case fieldResource:
				if len(s) > 1024 {
					return req, false
				}
				req.Resource = s
			}
		case fieldCost:
			if req.Cost, ok = p.cost(); !ok {
				return req, false
			}
		case fieldDryRun, fieldAutoHold:
			var v bool
			switch {
			case p.word("true"):
				v = true
			case p.word("false"):
			default:
				return req, false
			}
			if field == fieldDryRun {
				req.DryRun = v
			} else {
				req.AutoHold = v
			}
		}
		p.space()
		if p.byte('}') {
			break
		}
		if !p.byte(',') {
			return req, false
		}
	}
	p.space()
	if p.i != len(body) || seen&(fieldKey|fieldIP) == 0 {
		return req, false
	}
	return req, true
}

type parser struct {
	b []byte
	i int
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) word(w string) bool {
	if len(p.b)-p.i >= len(w) && string(p.b[p.i:p.i+len(w)]) == w {
		p.i += len(w)
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes and returns the
// bounds of its contents.
func (p *parser) str() ([2]int, bool) {
	if !p.byte('"') {
		return [2]int{}, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return [2]int{start, p.i - 1}, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return [2]int{}, false
		}
		p.i++
	}
	return [2]int{}, false
}

// cost reads a cost: a non-negative integer of at most 10 digits, without
// leading zeros, up to maxCost.
func (p *parser) cost() (int64, bool) {
	start := p.i
	var v int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' && p.i-start < 10 {
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	switch n := p.i - start; {
	case n == 0, n > 1 && p.b[start] == '0', v > maxCost:
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return 0, false
		}
	}
	return v, true
}

// canonicalIP returns the canonical text of an IP address (as
// enforce.NormalizeIP), without a copy when s is already canonical.
func canonicalIP(s string) (string, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", false
	}
	a = a.Unmap().WithZone("")
	var buf [64]byte
	if canon := a.AppendTo(buf[:0]); string(canon) != s {
		return string(canon), true
	}
	return s, true
}
