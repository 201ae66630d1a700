package ui

import (
	"net/http"
)

// Overview serves the operator's overview (GET / for operators).
func (c *Console) Overview() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusOK, "overview", "overview", nil)
	})
}
