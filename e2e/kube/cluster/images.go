package cluster

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// An Image is a container image made of one static Go binary, built from a
// package of the repository's go.work (or Built already).
type Image struct {
	// Name is the image reference pods use, "localhost/<name>:<tag>"; pods
	// must set imagePullPolicy: Never (there is no registry).
	Name string
	// Package is the Go package built, as `go build` takes it from the
	// repository's root ("./cmd/lameduck").
	Package string
	// Binary is the file name in the image, run as its entrypoint
	// ("/lameduck").
	Binary string
	// Args is the image's default command (CMD), after the entrypoint.
	Args []string
	// Built is the path of a static binary built already (Traefik's, which
	// Build makes outside the repository's go.work); when set, LoadImages
	// puts it in the image and Package is not built.
	Built string
}

// PauseImage is the pod sandbox image: it blocks until SIGTERM or SIGINT.
var PauseImage = Image{Name: "localhost/pause:e2e", Package: "./e2e/kube/images/pause", Binary: "pause"}

// LoadImages builds each image from the repository at root (the directory
// holding go.work) as an OCI image archive in Config.Work/images and
// imports it into the cluster's containerd, replacing what the name pointed
// to. The binaries are built with CGO_ENABLED=0, so they need no libc; a
// rebuild with a warm Go cache takes seconds.
func LoadImages(ctx context.Context, cfg Config, root string, images ...Image) error {
	cfg = cfg.withDefaults()
	dir := filepath.Join(cfg.Work, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, im := range images {
		short := strings.NewReplacer("/", "_", ":", "_").Replace(strings.TrimPrefix(im.Name, "localhost/"))
		binPath := im.Built
		if _, err := os.Stat(binPath); binPath != "" && err != nil {
			return fmt.Errorf("kube: image %s: %w (`go run ./e2e/kube/cmd/kubecluster build` makes it)", im.Name, err)
		}
		if binPath == "" {
			binPath = filepath.Join(dir, short+".bin")
			if err := BuildShipped(ctx, root, binPath, im.Package); err != nil {
				return fmt.Errorf("kube: image %s: %w", im.Name, err)
			}
		}
		archive := filepath.Join(dir, short+".oci.tar")
		if err := writeOCIArchive(im, binPath, archive); err != nil {
			return fmt.Errorf("kube: image %s: %w", im.Name, err)
		}
		if err := run(ctx, "ctr", "--address", cfg.ContainerdSocket(), "-n", "k8s.io", "images", "import", archive); err != nil {
			return fmt.Errorf("kube: importing %s: %w", im.Name, err)
		}
		cfg.Logf("image %s imported (%s)", im.Name, cmp.Or(im.Package, im.Built))
	}
	return nil
}

// writeOCIArchive makes a one-layer OCI image holding the binary at
// /<Binary> (mode 0755, owner root, mtime 0) and writes it as a tar of an
// OCI image layout, named with containerd's annotation so `ctr images
// import` tags it.
func writeOCIArchive(im Image, binPath, archive string) error {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: im.Binary, Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: []string{"/" + im.Binary}, Cmd: im.Args, Env: []string{"PATH=/"}, WorkingDir: "/"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	lay, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(lay)
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		return err
	}
	tag := im.Name[strings.LastIndex(im.Name, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          im.Name,
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	return tarDir(lay, archive)
}

// tarDir writes the files under dir into a tar at path, names relative.
func tarDir(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// BuildShipped runs `go build` of pkg (a package path relative to root,
// the directory holding go.work) into out with the Dockerfile's flags:
// CGO_ENABLED=0 (a static binary for a scratch image), -trimpath and
// -ldflags='-s -w', for linux/amd64. The images and the lameduck binary
// the suite runs on the host are built by it, and cmd/lameduck's e2e tests
// use the same flags, so the Go build cache compiles each package once for
// all of them. The error carries the go command's output.
func BuildShipped(ctx context.Context, root, out, pkg string) error {
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, b)
	}
	return nil
}
