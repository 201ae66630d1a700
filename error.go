// Package tollgate holds the vocabulary every other package shares: the
// application error type and its codes. Features live in internal/*.
package tollgate

import (
	"errors"
	"fmt"
)

// Error codes. Each maps to one HTTP status in internal/httpx.
const (
	EMALFORMED    = "malformed"          // 400: the body is not the JSON asked for
	EUNAUTHORIZED = "unauthorized"       // 401
	EFORBIDDEN    = "forbidden"          // 403
	ENOTFOUND     = "not_found"          // 404: also what another tenant's data looks like
	EMETHOD       = "method_not_allowed" // 405
	ECONFLICT     = "conflict"           // 409
	ETOOLARGE     = "too_large"          // 413
	EINVALID      = "invalid"            // 422: values that break the rules, by field
	ERATELIMITED  = "rate_limited"       // 429
	EINTERNAL     = "internal"           // 500: logged with detail, shown as a generic message
	EUNAVAILABLE  = "unavailable"        // 503: not ready yet, or a store is down
)

// Error is an error a caller may see. Message is safe to show; Fields names
// the offending input fields (field name → problem) for validation errors.
type Error struct {
	Code    string
	Message string
	Fields  map[string]string
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s %v", e.Code, e.Message, e.Fields)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns an EINVALID error naming the offending fields. It returns
// nil when fields is empty, so validators can end with `return Invalid(f)`.
func Invalid(fields map[string]string) error {
	if len(fields) == 0 {
		return nil
	}
	return &Error{Code: EINVALID, Message: "the request has invalid fields", Fields: fields}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the caller-safe message of err: an *Error's message,
// or a generic one for internal errors, whose detail must not leak.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
