package main

import (
	"encoding/json"
	"net/http"
	"time"
)

// handle turns f into a JSON handler that first does the simulated work.
func handle(work time.Duration, f func(*http.Request) (int, any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(work):
		case <-r.Context().Done():
			return
		}
		code, body := f(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(body)
	}
}

// loginUser is the account a login request submits, its form's user field
// (in the query or the body), and "" for every other request. It is both
// what the handler checks the password of and the user the login limits
// key on. Reading the form in the middleware leaves it parsed for the
// handler.
func loginUser(r *http.Request) string {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/login" {
		return ""
	}
	return r.FormValue("user")
}
