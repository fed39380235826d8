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
