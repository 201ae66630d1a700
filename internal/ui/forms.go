package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/httpx"
)

// fieldErrors returns err's field errors (the *tollgate.Error of a change
// operation's validation): field name → problem. Forms show each beside
// its field.
func fieldErrors(err error) map[string]string {
	var e *tollgate.Error
	if errors.As(err, &e) && e.Fields != nil {
		return e.Fields
	}
	return map[string]string{}
}

// statusOf is the HTTP status of err, for a page that shows it.
func statusOf(err error) int { return httpx.Status(err) }

// formFailed answers err, from checking or making a form's change, and
// reports whether there was one: when err names fields, reshow shows the
// form again with their problems and err's status; otherwise the error
// page.
func (c *Console) formFailed(w http.ResponseWriter, r *http.Request, err error,
	reshow func(status int, errs map[string]string)) bool {
	if err == nil {
		return false
	}
	if errs := fieldErrors(err); len(errs) > 0 {
		reshow(statusOf(err), errs)
		return true
	}
	c.Error(w, r, err)
	return true
}

// saveForm makes a form's change: when fe names problems with the form's
// values, or change fails with field errors, reshow shows the form again
// with them; any other error is the error page. ok is false when the
// change was not made (the answer is written).
func saveForm[T any](c *Console, w http.ResponseWriter, r *http.Request, fe formErrors,
	reshow func(status int, errs map[string]string), change func() (T, error)) (v T, ok bool) {
	if c.formFailed(w, r, fe.err(), reshow) {
		return v, false
	}
	v, err := change()
	return v, !c.formFailed(w, r, err, reshow)
}

// formErrors collects problems with a form's values before the change is
// made: a number that is not one, a time that does not parse.
type formErrors map[string]string

func (f formErrors) err() error { return tollgate.Invalid(f) }

// int64 parses the field name of v as an integer; "" is def.
func (f formErrors) int64(v url.Values, name string, def int64) int64 {
	return f.number(v.Get(name), name, def)
}

// number parses s as an integer (thousands separated by commas or not),
// naming field when it is not one; "" is def.
func (f formErrors) number(s, field string, def int64) int64 {
	s = strings.TrimSpace(strings.ReplaceAll(s, ",", ""))
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f[field] = "must be a whole number"
	}
	return n
}

// optInt64 parses an optional integer field: nil when empty.
func (f formErrors) optInt64(v url.Values, name string) *int64 {
	if strings.TrimSpace(v.Get(name)) == "" {
		return nil
	}
	n := f.int64(v, name, 0)
	return &n
}

// dateTime parses an <input type="datetime-local"> or date value as UTC;
// nil when empty.
func (f formErrors) dateTime(v url.Values, name string) *time.Time {
	s := strings.TrimSpace(v.Get(name))
	if s == "" {
		return nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return &t
		}
	}
	f[name] = "must be a date and time such as 2026-10-31T18:00 (UTC)"
	return nil
}

// confirmed reports whether a destructive form was confirmed: by the
// script's dialog, or on the confirmation page a plain form leads to.
func confirmed(r *http.Request) bool { return r.PostForm.Get("confirmed") == "yes" }

// confirmPage is the data of the page that asks to confirm an action
// when the browser ran no script.
type confirmPage struct {
	Heading string
	Message string
	Action  string // the form's path
	Button  string
	Fields  map[string]string // the original form's fields, sent again
	Back    string
}

// confirmThen makes a change once it is confirmed: until the request is,
// it asks (ask, on a page of section nav); then change makes it and the
// browser goes to ask.Back with the message done. An error of change is
// the error page.
func (c *Console) confirmThen(w http.ResponseWriter, r *http.Request, nav string, ask confirmPage, done string,
	change func() error) {
	if !confirmed(r) {
		c.askConfirmation(w, r, nav, ask)
		return
	}
	if err := change(); err != nil {
		c.Error(w, r, err)
		return
	}
	redirect(w, r, ask.Back, done)
}

// askConfirmation renders the confirmation page for the request's form.
func (c *Console) askConfirmation(w http.ResponseWriter, r *http.Request, nav string, p confirmPage) {
	p.Action = r.URL.Path
	p.Fields = map[string]string{}
	for k, v := range r.PostForm {
		if k != csrfField && k != "confirmed" && len(v) > 0 {
			p.Fields[k] = v[0]
		}
	}
	c.render(w, r, http.StatusOK, "confirm", nav, p)
}
