package client

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
)

// ProblemError is an error answer of a Tollgate server: an RFC 9457
// application/problem+json body, or the status alone when the body was not
// one. Use errors.As to get it from an error the client returned.
type ProblemError struct {
	// Status is the HTTP status of the answer.
	Status int
	Type   string
	Title  string
	Detail string
	// Code is Tollgate's error code: invalid, malformed, not_found,
	// conflict, unauthorized, forbidden, too_large, rate_limited, internal,
	// method_not_allowed, unavailable; "" when the body was not a problem.
	Code string
	// Errors names each invalid field and what is wrong with it, e.g.
	// "ip" → "must be an IPv4 or IPv6 address".
	Errors map[string]string
	// RetryAfter is the answer's Retry-After, when it had one.
	RetryAfter time.Duration
}

// Error describes the problem, naming the invalid fields in order, e.g.
// "422 invalid: the request has invalid fields: ip must be an IPv4 or IPv6
// address".
func (e *ProblemError) Error() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	} else if t := http.StatusText(e.Status); t != "" {
		b.WriteString(" " + t)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if len(e.Errors) > 0 {
		fields := make([]string, 0, len(e.Errors))
		for f := range e.Errors {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		for i, f := range fields {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(f + " " + e.Errors[f])
		}
	}
	return b.String()
}

// refusal reports whether p is the check API refusing a check rather
// than something in between answering for it: a status the contract
// gives a check's refusal (400, 401, 413, 422), or another status below
// 500 with a problem of one of Tollgate's codes. A proxy's or load
// balancer's 404, 408 or 429 is not one: the FailMode decides it, as it
// decides an outage.
func (p *ProblemError) refusal() bool {
	switch {
	case p.Status >= 500:
		return false
	case p.Status == http.StatusBadRequest, p.Status == http.StatusUnauthorized,
		p.Status == http.StatusRequestEntityTooLarge, p.Status == http.StatusUnprocessableEntity:
		return true
	}
	return slices.Contains(tollgateCodes, p.Code)
}

// tollgateCodes are the codes of Tollgate's problems.
var tollgateCodes = []string{
	tollgate.EMALFORMED, tollgate.EUNAUTHORIZED, tollgate.EFORBIDDEN, tollgate.ENOTFOUND, tollgate.EMETHOD,
	tollgate.ECONFLICT, tollgate.ETOOLARGE, tollgate.EINVALID, tollgate.ERATELIMITED, tollgate.EINTERNAL,
	tollgate.EUNAVAILABLE,
}

// maxProblemBody bounds how much of an error answer is read.
const maxProblemBody = 64 << 10

// readProblem turns a non-2xx answer into a *ProblemError. A body that is
// not problem JSON is kept (shortened) as the detail, so that an answer
// from a proxy in between still says something.
func readProblem(resp *http.Response) *ProblemError {
	p := &ProblemError{Status: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "application/problem+json" || mediaType == "application/json" {
		var body struct {
			Type   string            `json:"type"`
			Title  string            `json:"title"`
			Status int               `json:"status"`
			Detail string            `json:"detail"`
			Code   string            `json:"code"`
			Errors map[string]string `json:"errors"`
		}
		if json.Unmarshal(raw, &body) == nil {
			p.Type, p.Title, p.Detail, p.Code, p.Errors = body.Type, body.Title, body.Detail, body.Code, body.Errors
			return p
		}
	}
	p.Title = http.StatusText(resp.StatusCode)
	detail := strings.TrimSpace(string(raw))
	if len(detail) > 200 {
		detail = strings.ToValidUTF8(detail[:200], "") + "…"
	}
	p.Detail = detail
	return p
}
