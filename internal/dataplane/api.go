package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
)

// maxBody bounds a request's body: a table with its certificates.
const maxBody = 64 << 20

// routes is the control API. Handlers decode, call the ingress or the mesh
// node, and encode; only the agent reaches the socket (0600 in its
// private data directory).
func (p *plane) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathVersion, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, Version{Binary: p.binary, PID: os.Getpid(), Config: p.cfg})
	})
	mux.HandleFunc("GET "+pathStatus, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, Status{Challenges: p.in.Challenges(), HTTPSProblem: p.in.HTTPSProblem(),
			HTTP: addrString(p.in.HTTPAddr()), HTTPS: addrString(p.in.HTTPSAddr()), Admin: addrString(p.in.AdminAddr()),
			Mesh: p.meshAddr})
	})
	mux.HandleFunc("PUT "+pathTable, func(w http.ResponseWriter, r *http.Request) {
		var t ingress.Table
		if !readJSON(w, r, &t) {
			return
		}
		if err := t.Check(); err != nil {
			// Refused whole: what is served, and handed on, stays.
			http.Error(w, fmt.Sprintf("ingress table: %v", err), http.StatusUnprocessableEntity)
			return
		}
		err := p.in.Update(t)
		// Kept even when part of it failed: Update applied the rest, and a
		// successor applies it the same way.
		p.update(func(s *State) { s.Table = &t })
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		}
	})
	mux.HandleFunc("PUT "+pathProblem, func(w http.ResponseWriter, r *http.Request) {
		var reason string
		if !readJSON(w, r, &reason) {
			return
		}
		p.in.SetProblem(reason)
		p.update(func(s *State) { s.Problem = reason })
	})
	mux.HandleFunc("PUT "+pathPeers, func(w http.ResponseWriter, r *http.Request) {
		var peers []contract.Peer
		if !readJSON(w, r, &peers) {
			return
		}
		p.node.SetPeers(peers)
		p.update(func(s *State) { s.Peers = peers })
	})
	mux.HandleFunc("POST "+pathDrain+"{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		p.update(func(s *State) {
			if !slices.Contains(s.Fenced, id) {
				s.Fenced = append(s.Fenced, id)
			}
		})
		if err := p.in.Drain(r.Context(), id); err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		}
	})
	mux.HandleFunc("POST "+pathGone+"{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		p.in.Gone(id)
		p.update(func(s *State) { s.Fenced = slices.DeleteFunc(s.Fenced, func(f string) bool { return f == id }) })
	})
	mux.HandleFunc("POST "+pathReloadCerts, func(w http.ResponseWriter, _ *http.Request) {
		if err := p.certs.reload(); err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		}
	})
	mux.HandleFunc("POST "+pathStop, func(w http.ResponseWriter, _ *http.Request) {
		p.stop("an agent told it to stop")
	})
	mux.HandleFunc("POST "+pathHandover, p.handover)
	mux.HandleFunc("PUT "+pathFenceLease, func(w http.ResponseWriter, r *http.Request) {
		var l FenceLease
		if !readJSON(w, r, &l) {
			return
		}
		p.update(func(s *State) { s.Lease = &l })
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v) // the agent sees a cut answer as an error
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(v); err != nil {
		http.Error(w, fmt.Sprintf("decode %s: %v", strings.TrimPrefix(r.URL.Path, "/v1/"), err), http.StatusBadRequest)
		return false
	}
	return true
}
