// Command web is the CI example's app: it answers with the commit it was
// built from, and /healthz for Hatchery's health check.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	version := os.Getenv("GIT_SHA")
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "shop, built from %s\n", version) })
	log.Fatal(http.ListenAndServe(":8080", nil))
}
