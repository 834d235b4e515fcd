package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/imageref"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// ImageResolver resolves an image's tag to the digest its registry serves
// now, asked with login (nil: anonymously): imageref.Registry, a fake in
// pure tests. A failure names the registry (*imageref.Error).
type ImageResolver interface {
	Resolve(ctx context.Context, image string, login *imageref.Login) (string, error)
}

// maxResolving bounds the registry requests one plan makes at once, and
// resolveTimeout all of them, well within a request's deadline (30 s by
// default) so that a registry that never answers is named, not timed out.
const (
	maxResolving   = 8
	resolveTimeout = 15 * time.Second
)

// pinKey is one resolution a plan needs: eggs of one image pulled with one
// login share it.
type pinKey struct {
	image string
	login imageref.Login
	anon  bool
}

// pinImages returns resources with every egg of the default pull policy
// (contract.PullDigest) given the digest its image's tag resolves to now
// (inputs.Egg.Digest), asked with the login its hosts pull with: the
// project's from `registries:` (its password from secrets, the plan's
// values) or the cluster's. An egg that builds its image, or pulls with
// always or missing, is left as it is. A tag that cannot be resolved fails
// the plan (api.CodeImageUnresolved), naming the egg, the image and the
// registry: a host never decides what the others run.
func (s *Service) pinImages(ctx context.Context, resources []api.DesiredResource, secrets map[string]string) ([]api.DesiredResource, error) {
	out := slices.Clone(resources)
	eggs := map[pinKey][]int{} // what to resolve, and the eggs that get it
	clusterLogins := map[string]*imageref.Login{}
	for i := range out {
		d := &out[i]
		if d.Type != resource.Egg {
			continue
		}
		in, err := inputs.Decode[inputs.Egg](d.Inputs)
		if err != nil {
			return nil, api.BadRequest("resources (egg %q): %v", d.Name, err)
		}
		if _, ok := d.Inputs["digest"]; ok { // the control plane's alone
			d.Inputs = resource.Clone(d.Inputs)
			delete(d.Inputs, "digest")
		}
		if in.Image == "" || contract.PullPolicy(in.Pull) != "" && contract.PullPolicy(in.Pull) != contract.PullDigest {
			continue
		}
		login, err := s.pullLogin(ctx, in, secrets, clusterLogins)
		if err != nil {
			return nil, fmt.Errorf("egg %s: %w", d.Name, err)
		}
		k := pinKey{image: in.Image, anon: login == nil}
		if login != nil {
			k.login = *login
		}
		eggs[k] = append(eggs[k], i)
	}
	var (
		mu      sync.Mutex // guards digests and errs
		digests = map[pinKey]string{}
		errs    []error
	)
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxResolving)
	for k, idx := range eggs {
		g.Go(func() error {
			var login *imageref.Login
			if !k.anon {
				login = &k.login
			}
			dgst, err := s.deps.Images.Resolve(gctx, k.image, login)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				for _, i := range idx {
					errs = append(errs, fmt.Errorf("egg %s: %w", out[i].Name, err))
				}
				return nil
			}
			digests[k] = dgst
			return nil
		})
	}
	_ = g.Wait()
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, api.Errorf(api.CodeImageUnresolved, "%s (the control plane pins each image's digest at plan: "+
			"fix the registry or its login, or give the egg pull: missing to let each host pull the tag)", oneLine(errors.Join(errs...)))
	}
	for k, idx := range eggs {
		for _, i := range idx {
			out[i].Inputs = resource.Clone(out[i].Inputs)
			out[i].Inputs["digest"] = digests[k]
		}
	}
	return out, nil
}

// pullLogin is the login an egg's hosts pull its image with, as the
// control plane asks the registry: the project's (its username as written,
// its password the secret's value sent with the plan), else the cluster's
// for the image's registry (looked up once per host into cluster), else
// none.
func (s *Service) pullLogin(ctx context.Context, in inputs.Egg, secrets map[string]string, cluster map[string]*imageref.Login) (*imageref.Login, error) {
	if a := in.PullAuth; a != nil {
		plain, err := resource.Resolve(map[string]any{"username": a.Username, "password": a.Password}, func(r resource.Ref) (any, error) {
			typ, name, _ := resource.SplitKey(r.Key)
			v, ok := secrets[name]
			if typ != resource.Secret || r.Output != inputs.OutputHandle || !ok {
				return nil, api.BadRequest("registry %s: its login refers to %s, which is not a secret sent with the plan", a.Registry, r)
			}
			return v, nil
		})
		if err != nil {
			return nil, err
		}
		user, _ := plain["username"].(string)
		pass, _ := plain["password"].(string)
		return &imageref.Login{Username: user, Password: pass}, nil
	}
	host := contract.ImageRegistry(in.Image)
	if l, ok := cluster[host]; ok {
		return l, nil
	}
	auth, err := s.deps.Providers.ClusterLogin(ctx, host)
	if err != nil {
		return nil, err
	}
	var l *imageref.Login
	if auth != nil {
		l = &imageref.Login{Username: auth.Username, Password: string(auth.Password)}
	}
	cluster[host] = l
	return l, nil
}

// imageMoves are the plan's notes on eggs whose tag is unchanged but whose
// digest is not: the tag moved since the deployed apply ("web: image
// ghcr.io/acme/web:main moved sha256:ab… → sha256:cd…"), or the egg is
// pinned for the first time (deployed before the control plane pinned
// images, with the same default policy).
func imageMoves(records []*resource.Deployed, resources []api.DesiredResource) []string {
	deployed := map[string]inputs.Egg{}
	for _, r := range records {
		if r.Type == resource.Egg && !r.Pending {
			if in, err := inputs.Decode[inputs.Egg](r.Inputs); err == nil {
				deployed[r.Name] = in
			}
		}
	}
	var notes []string
	for _, d := range resources {
		if d.Type != resource.Egg {
			continue
		}
		in, err := inputs.Decode[inputs.Egg](d.Inputs)
		old, ok := deployed[d.Name]
		if err != nil || !ok || in.Digest == "" || in.Image != old.Image || in.Digest == old.Digest || old.Pull != in.Pull {
			continue // a new tag or a new policy shows in the change itself
		}
		if old.Digest == "" {
			notes = append(notes, fmt.Sprintf("%s: image %s pinned to %s (its containers roll once)", d.Name, in.Image, shortDigest(in.Digest)))
			continue
		}
		notes = append(notes, fmt.Sprintf("%s: image %s moved %s → %s", d.Name, in.Image, shortDigest(old.Digest), shortDigest(in.Digest)))
	}
	slices.Sort(notes)
	return notes
}

// shortDigest is a digest as a plan shows it: "sha256:" and 12 hex digits.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12] + "…"
	}
	return d
}
