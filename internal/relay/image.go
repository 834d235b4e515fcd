package relay

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// ImageRepository is the repository of relay images on every Docker host; the
// tag is the hash of the binary inside, so a new hatch binary makes a new
// image and an unchanged one is built once per engine.
const ImageRepository = "hatch-relay"

// dockerfile runs the relay: the image holds nothing but the hatch binary.
const dockerfile = "FROM scratch\nCOPY hatch /hatch\nENTRYPOINT [\"/hatch\", \"relay\"]\n"

// Image is a relay image's build context: a Dockerfile and the hatch binary.
// Nothing is pulled: the binary is static (CGO_ENABLED=0), so the image is
// built FROM scratch on any engine, offline.
type Image struct {
	// Ref is the image reference to tag the build with.
	Ref string
	// Context is the tar the classic builder takes.
	Context []byte
}

// ImageFromBinary reads the hatch binary at path (os.Executable() in the
// agent) and makes the relay image's build context.
func ImageFromBinary(path string) (Image, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return Image{}, fmt.Errorf("relay image: %w", err)
	}
	sum := sha256.Sum256(bin)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte(dockerfile)},
		{"hatch", 0o755, bin},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return Image{}, fmt.Errorf("relay image: %w", err)
		}
		if _, err := io.Copy(tw, bytes.NewReader(f.data)); err != nil {
			return Image{}, fmt.Errorf("relay image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return Image{}, fmt.Errorf("relay image: %w", err)
	}
	return Image{Ref: ImageRepository + ":" + hex.EncodeToString(sum[:6]), Context: buf.Bytes()}, nil
}
