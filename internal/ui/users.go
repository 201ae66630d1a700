package ui

import (
	"context"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/page"
)

// userListPage is the data of the users page.
type userListPage struct {
	Query, Role string
	Rows        []userRow
	Next        string
	Form        userForm
	Errors      map[string]string
	Me          string
}

type userRow struct {
	auth.User
	TenantName string
}

type userForm struct {
	Email, Role, Tenant string
}

// userCreatedPage shows a new user's generated password, once.
type userCreatedPage struct {
	User       auth.User
	TenantName string
	Password   string
}

// UserList serves GET /users: operators and tenant users, and the form
// that creates one.
func (c *Console) UserList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.userList(w, r, http.StatusOK, userForm{Role: "tenant_admin"}, nil)
	})
}

func (c *Console) userList(w http.ResponseWriter, r *http.Request, status int, form userForm, errs map[string]string) {
	q := r.URL.Query()
	p := userListPage{Query: strings.TrimSpace(q.Get("q")), Role: q.Get("role"), Form: form, Errors: errs, Me: session(r).User.ID}
	if !auth.Role(p.Role).Valid() {
		p.Role = ""
	}
	users, next, err := listPage("/users", r, func(ctx context.Context, pr page.Request) (page.Page[auth.User], error) {
		return c.auth.ListUsersPage(ctx, auth.UserFilter{Query: p.Query, Role: auth.Role(p.Role)}, pr)
	})
	if err != nil {
		c.Error(w, r, err)
		return
	}
	names, err := tenantNames(r.Context(), c.tenants, users, func(u auth.User) string { return u.TenantID })
	if err != nil {
		c.Error(w, r, err)
		return
	}
	for _, u := range users {
		p.Rows = append(p.Rows, userRow{User: u, TenantName: names[u.TenantID]})
	}
	p.Next = next
	c.render(w, r, status, "user_list", "users", p)
}

// UserCreate serves POST /users: auth.Ops.CreateUser creates the user
// with a generated password, which the page shows once. The tenant may be
// given by name or ID.
func (c *Console) UserCreate() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		form := userForm{Email: strings.TrimSpace(r.PostForm.Get("email")), Role: r.PostForm.Get("role"),
			Tenant: strings.TrimSpace(r.PostForm.Get("tenant"))}
		in := auth.CreateUserInput{Email: form.Email, Role: auth.Role(form.Role)}
		tenantName := ""
		if form.Role != string(auth.RoleOperator) && form.Tenant != "" {
			t, err := c.tenants.Find(r.Context(), form.Tenant)
			if err != nil {
				c.userList(w, r, http.StatusUnprocessableEntity, form, map[string]string{"tenant_id": "no tenant has this name or ID"})
				return
			}
			in.TenantID, tenantName = t.ID, t.Name
		}
		res, err := c.cfg.Auth.CreateUser(r.Context(), actor(r), in)
		if c.formFailed(w, r, err, func(status int, errs map[string]string) { c.userList(w, r, status, form, errs) }) {
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		c.render(w, r, http.StatusCreated, "user_created", "users", userCreatedPage{User: res.User, TenantName: tenantName, Password: res.Password})
	})
}

// UserAction serves POST /users/{userID}/disable (disable true) and
// POST /users/{userID}/sessions/revoke, after confirmation.
func (c *Console) UserAction(disable bool) http.Handler {
	return loadedHandler(c, pathNamed("userID", c.auth.GetUser), func(w http.ResponseWriter, r *http.Request, u auth.User) {
		change, heading, msg, button, done := c.cfg.Auth.EndUserSessions, "Sign "+u.Email+" out everywhere?",
			"Every session of "+u.Email+" ends at once; they may sign in again.", "End sessions", "Sessions of "+u.Email+" ended."
		if disable {
			change, heading, msg, button, done = c.cfg.Auth.DisableUser, "Disable "+u.Email+"?",
				u.Email+" can no longer sign in, and every session of theirs ends at once.", "Disable user", u.Email+" disabled."
		}
		c.confirmThen(w, r, "users", confirmPage{Heading: heading, Message: msg, Button: button, Back: "/users"}, done, func() error {
			_, err := change(r.Context(), actor(r), u.ID)
			return err
		})
	})
}
