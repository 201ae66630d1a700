package main

import (
	"testing"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// signIn signs the browser in through the console's sign-in form.
func (b *browser) signIn(email, password string) {
	b.t.Helper()
	b.open("/login")
	b.fill(map[string]string{`input[name="email"]`: email, `input[name="password"]`: password})
	b.click(`form[action="/login"] button[type="submit"]`, "nav.mainnav")
}

func TestConsoleSignIn(t *testing.T) {
	admin := startAdmin(t, testenv.DatabaseURL(t), nil)
	createUser(t, admin.DB, "ops@example.com", auth.RoleOperator, "")
	b := newBrowser(t, admin.URL)
	b.open("/")
	if loc := b.location(); loc != "/login?next=%2F" {
		t.Fatalf("signed out, / went to %s, want the sign-in page", loc)
	}
	b.signIn("ops@example.com", "password-ops@example.com")
	if got := b.text("h1"); got != "Overview" {
		t.Fatalf("after sign-in: h1 %q", got)
	}
	b.screenshot("login-done")
}
