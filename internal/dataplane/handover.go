package dataplane

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// The handover, on the control socket: the successor sends POST
// pathHandover; the predecessor takes the connection from net/http and
// sends, in one message, an 8-byte length and the descriptors (the lock
// file first, then every listener), then the handoverHeader in JSON of that
// length. The successor serves on the listeners and writes handoverReady;
// only then does the predecessor stop accepting and drain. A successor that
// fails before it is ready closes the connection, and the predecessor
// carries on serving as if nothing happened.
const (
	handoverReady = 'R'
	// readyWait bounds how long a predecessor waits for its successor to
	// serve: starting the ingress and the mesh takes well under a second.
	readyWait = 30 * time.Second
	// maxHandedOn bounds the descriptors a successor takes: the ports of
	// one host, with room to spare.
	maxHandedOn = 4096
)

// handover is the predecessor's side.
func (p *plane) handover(w http.ResponseWriter, r *http.Request) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no handover on this connection", http.StatusInternalServerError)
		return
	}
	raw, _, err := hj.Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer raw.Close()
	conn, ok := raw.(*net.UnixConn)
	if !ok {
		p.log.Error("handover asked on a connection that is not a Unix socket's")
		return
	}
	keys, files := p.ls.files()
	defer closeFiles(files)
	header, err := json.Marshal(handoverHeader{Keys: keys, State: p.snapshot()})
	if err != nil {
		p.log.Error("handover refused", zap.Error(err))
		return
	}
	fds := []int{int(p.lock.Fd())}
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(header)))
	if _, _, err := conn.WriteMsgUnix(n[:], syscall.UnixRights(fds...), nil); err != nil {
		p.log.Error("handover failed: this data plane keeps serving", zap.Error(err))
		return
	}
	if _, err := conn.Write(header); err != nil {
		p.log.Error("handover failed: this data plane keeps serving", zap.Error(err))
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(readyWait))
	var ready [1]byte
	if _, err := io.ReadFull(conn, ready[:]); err != nil || ready[0] != handoverReady {
		p.log.Error("the successor did not take over: this data plane keeps serving", zap.Error(err))
		return
	}
	p.log.Info("handed over to a successor", zap.Int("listeners", len(keys)))
	p.stop(whyHandedOver)
}

// receiveHandover is the successor's side: it asks the data plane serving
// dataDir's socket for its listeners (put into ls), lock and state, and
// returns the connection on which to say it is ready.
func receiveHandover(ctx context.Context, dataDir string, ls *listenerSet) (*net.UnixConn, *os.File, State, error) {
	conn, err := dialSocket(ctx, dataDir)
	if err != nil {
		return nil, nil, State{}, fmt.Errorf("handover: reach the running data plane: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = conn.Close() // tells the predecessor to carry on
		}
	}()
	_ = conn.SetDeadline(time.Now().Add(readyWait))
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: dataplane\r\nContent-Length: 0\r\n\r\n", pathHandover); err != nil {
		return nil, nil, State{}, fmt.Errorf("handover: ask: %w", err)
	}
	var n [8]byte
	oob := make([]byte, syscall.CmsgSpace(4*(maxHandedOn+1)))
	got, oobn, _, _, err := conn.ReadMsgUnix(n[:], oob)
	if err != nil {
		return nil, nil, State{}, fmt.Errorf("handover: read the sockets: %w", err)
	}
	files, err := parseRights(oob[:oobn])
	if err != nil {
		return nil, nil, State{}, err
	}
	if _, err := io.ReadFull(conn, n[got:]); err != nil {
		closeFiles(files)
		return nil, nil, State{}, fmt.Errorf("handover: read: %w", err)
	}
	if len(files) == 0 {
		return nil, nil, State{}, errors.New("handover: no lock file passed")
	}
	lock, listeners := files[0], files[1:]
	var h handoverHeader
	size := binary.BigEndian.Uint64(n[:])
	if size > maxBody {
		closeFiles(files)
		return nil, nil, State{}, fmt.Errorf("handover: header of %d bytes", size)
	}
	if err := json.NewDecoder(io.LimitReader(conn, int64(size))).Decode(&h); err != nil {
		closeFiles(files)
		return nil, nil, State{}, fmt.Errorf("handover: read the state: %w", err)
	}
	if err := ls.inherit(h.Keys, listeners); err != nil {
		_ = lock.Close()
		return nil, nil, State{}, err
	}
	_ = conn.SetDeadline(time.Time{})
	ok = true
	return conn, lock, h.State, nil
}

// parseRights returns the descriptors of a SCM_RIGHTS message as files.
func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handover: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("handover: %w", err)
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "handed-on"))
		}
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close() // copies: the listeners keep their own
	}
}
