// Package config reads settings from environment variables, collecting a
// message that names every invalid one.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Env reads typed settings through getenv. Errors accumulate; call Err at
// the end.
type Env struct {
	getenv func(string) string
	errs   []error
}

// New returns an Env reading through getenv.
func New(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// String returns the setting or def when unset.
func (e *Env) String(name, def string) string {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		return v
	}
	return def
}

// OneOf returns the setting, which must be one of allowed.
func (e *Env) OneOf(name, def string, allowed ...string) string {
	v := e.String(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	e.errs = append(e.errs, fmt.Errorf("%s=%q: must be one of %s", name, v, strings.Join(allowed, ", ")))
	return def
}

// Duration returns the setting parsed by time.ParseDuration; it must be > 0.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: must be a positive duration such as 500ms or 30s", name, v))
		return def
	}
	return d
}

// Int returns the setting as an integer ≥ min.
func (e *Env) Int(name string, def, min int) int {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: must be an integer ≥ %d", name, v, min))
		return def
	}
	return n
}

// Bool returns the setting as a boolean (true/false/1/0).
func (e *Env) Bool(name string, def bool) bool {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: must be true or false", name, v))
		return def
	}
	return b
}

// List returns a comma-separated setting.
func (e *Env) List(name string) []string {
	v := e.String(name, "")
	if v == "" {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Fail records a problem with a setting found by the caller's own checks.
func (e *Env) Fail(name, msg string) { e.errs = append(e.errs, fmt.Errorf("%s: %s", name, msg)) }

// Err returns every problem found, or nil.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration: %w", errors.Join(e.errs...))
}

// SecretKey reads TOLLGATE_SECRET_KEY, the key that seals secrets at rest
// (32 bytes, base64), and TOLLGATE_SECRET_KEY_PREVIOUS, earlier keys that
// still open what they sealed (comma-separated). Both are "" / nil when
// unset; the caller decides whether it needs them.
func (e *Env) SecretKey() (current string, previous []string) {
	return e.String("TOLLGATE_SECRET_KEY", ""), e.List("TOLLGATE_SECRET_KEY_PREVIOUS")
}
