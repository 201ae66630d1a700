// Package httpx holds the JSON and problem+json helpers shared by Tollgate's
// HTTP servers.
package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// statusByCode is the one table from error code to HTTP status.
var statusByCode = map[string]int{
	tollgate.EMALFORMED:    http.StatusBadRequest,
	tollgate.EUNAUTHORIZED: http.StatusUnauthorized,
	tollgate.EFORBIDDEN:    http.StatusForbidden,
	tollgate.ENOTFOUND:     http.StatusNotFound,
	tollgate.EMETHOD:       http.StatusMethodNotAllowed,
	tollgate.ECONFLICT:     http.StatusConflict,
	tollgate.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	tollgate.EINVALID:      http.StatusUnprocessableEntity,
	tollgate.ERATELIMITED:  http.StatusTooManyRequests,
	tollgate.EINTERNAL:     http.StatusInternalServerError,
	tollgate.EUNAVAILABLE:  http.StatusServiceUnavailable,
}

// Status returns the HTTP status for err's code.
func Status(err error) int {
	if s, ok := statusByCode[tollgate.ErrorCode(err)]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Problem is an RFC 9457 problem details body. Errors lists field-level
// problems of invalid input.
type Problem struct {
	Type   string            `json:"type"`
	Title  string            `json:"title"`
	Status int               `json:"status"`
	Detail string            `json:"detail,omitempty"`
	Code   string            `json:"code"`
	Errors map[string]string `json:"errors,omitempty"`
}

// Error writes err as application/problem+json. Internal errors are logged
// with their detail and shown to the caller as a generic message.
func Error(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	// A value Postgres refuses is the caller's input, not our fault.
	err = postgres.Translate(err)
	code := tollgate.ErrorCode(err)
	status := Status(err)
	if code == tollgate.EINTERNAL && log != nil {
		log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	p := Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: tollgate.ErrorMessage(err),
		Code:   code,
	}
	var e *tollgate.Error
	if errors.As(err, &e) {
		p.Errors = e.Fields
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// JSON writes v as a JSON response with the given status. v is encoded
// whole before anything is written, so a value encoding/json refuses (a
// time outside the years 0000 to 9999, a NaN) is answered as a 500
// problem, logged with r and the error, instead of a status with an empty
// or cut body. Safe for concurrent use; its buffers are pooled, so an
// answer costs no allocation of its own beyond what encoding v does.
func JSON(w http.ResponseWriter, r *http.Request, log *slog.Logger, status int, v any) {
	b := jsonBuffers.Get().(*jsonBuffer)
	defer b.release()
	if err := b.enc.Encode(v); err != nil {
		Error(w, r, log, fmt.Errorf("httpx: encode %T: %w", v, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.buf.Bytes())
}

// jsonBuffer is an answer's encoding: the buffer and an encoder that
// writes into it, reused together.
type jsonBuffer struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// maxPooledJSON is the largest buffer put back in the pool: a rare large
// answer (a long list of statements) is not kept alive.
const maxPooledJSON = 64 << 10

var jsonBuffers = sync.Pool{New: func() any {
	b := new(jsonBuffer)
	b.enc = json.NewEncoder(&b.buf)
	return b
}}

func (b *jsonBuffer) release() {
	if b.buf.Cap() > maxPooledJSON {
		return
	}
	b.buf.Reset()
	jsonBuffers.Put(b)
}

// Validator is implemented by request types that check their own fields.
type Validator interface {
	Validate() error
}

// Decode reads one JSON value of at most maxBytes from r's body into v,
// rejecting unknown fields and trailing data, then runs v's Validate method
// if it has one. Errors are *tollgate.Error: EMALFORMED for malformed JSON
// (with the field when known), ETOOLARGE for an oversized body, and
// Validate's own (EINVALID naming the fields).
func Decode(r *http.Request, maxBytes int64, v any) error {
	if err := DecodeBody(r, maxBytes, v); err != nil {
		return err
	}
	if val, ok := v.(Validator); ok {
		return val.Validate()
	}
	return nil
}

// DecodeBody is Decode without validation.
func DecodeBody(r *http.Request, maxBytes int64, v any) error {
	body := http.MaxBytesReader(nil, r.Body, maxBytes)
	var read bytes.Buffer // what the decoder read, to name a field it could not
	dec := json.NewDecoder(io.TeeReader(body, &read))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if field, msg, ok := valueError(err, read.Bytes(), reflect.TypeOf(v)); ok {
			return Malformed(field, msg)
		}
		return decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		if err != nil {
			return decodeError(err)
		}
		return Malformed("body", "the body must hold exactly one JSON value")
	}
	return nil
}

// Malformed returns an EMALFORMED error (400) about field.
func Malformed(field, msg string) error {
	return &tollgate.Error{Code: tollgate.EMALFORMED, Message: "malformed request body", Fields: map[string]string{field: msg}}
}

func decodeError(err error) error {
	var maxErr *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &maxErr):
		return tollgate.Errorf(tollgate.ETOOLARGE, "the body is larger than %d bytes", maxErr.Limit)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return Malformed(field, "must be a JSON "+jsonKind(typeErr.Type.Kind().String()))
	case errors.As(err, &syntaxErr):
		return Malformed("body", "invalid JSON: "+syntaxErr.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Malformed("body", "the body is empty or truncated")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Malformed(name, "unknown field")
	default:
		return Malformed("body", "invalid JSON")
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "integer"
	case "float32", "float64":
		return "number"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	}
	return goKind
}

// Healthz answers 200 while the process runs.
func Healthz(w http.ResponseWriter, r *http.Request) {
	JSON(w, r, nil, http.StatusOK, map[string]string{"status": "ok"})
}

// NotFound answers every unknown path with a 404 problem.
func NotFound(log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		Error(w, r, log, tollgate.Errorf(tollgate.ENOTFOUND, "no such endpoint"))
	}
}

// MethodNotAllowed answers a known path asked with another method: a 405
// problem with the Allow header listing the methods the router has for
// the path.
func MethodNotAllowed(routes chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		Error(w, r, nil, tollgate.Errorf(tollgate.EMETHOD, "%s is not allowed on this endpoint", r.Method))
	}
}
