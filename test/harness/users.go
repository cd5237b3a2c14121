package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/test/testenv"
)

// User is a person sluice governs, acting through kubectl with the
// credentials of one namespace: a ServiceAccount token whose roles are
// bound in that namespace only. Tests of sluice's rules act as a User,
// never as an admin.
type User struct {
	// Name is the ServiceAccount's name; Namespace is where it lives and
	// where its roles are bound.
	Name, Namespace string
	// Kubeconfig authenticates as the user, in Namespace.
	Kubeconfig string

	kubectl string
	cs      kubernetes.Interface
}

// NewUser creates the ServiceAccount name in namespace, binds it there to
// each ClusterRole of roles ("edit", "view", "sluice-workload-approver"),
// mints a token and writes a kubeconfig into env.Dir. Call WaitAllowed for
// what the test relies on: the authorizer learns of new bindings, and of
// roles aggregated into built-in ones, a moment later.
func NewUser(ctx context.Context, env *testenv.Env, namespace, name string, roles ...string) (*User, error) {
	cs, err := env.Clientset()
	if err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	for _, role := range roles {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
		}
		if _, err := cs.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("binding %s/%s to ClusterRole %s: %w", namespace, name, role, err)
		}
	}
	token, err := mintToken(ctx, cs, namespace, name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(env.Dir, "users")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	path := filepath.Join(dir, namespace+"-"+name+".kubeconfig")
	if err := writeKubeconfig(path, env.Config, "system:serviceaccount:"+namespace+":"+name, token, namespace); err != nil {
		return nil, err
	}
	return &User{Name: name, Namespace: namespace, Kubeconfig: path, kubectl: env.Kubectl(), cs: cs}, nil
}

// Username is the name the API server knows the user by.
func (u *User) Username() string { return "system:serviceaccount:" + u.Namespace + ":" + u.Name }

// Kubectl runs kubectl as the user, in the user's namespace unless args
// name another. It returns what kubectl printed, stdout then stderr, and
// an error that holds the output when kubectl failed.
func (u *User) Kubectl(ctx context.Context, args ...string) (string, error) {
	return u.run(ctx, nil, args)
}

// KubectlStdin is Kubectl with stdin, for `kubectl create -f -`.
func (u *User) KubectlStdin(ctx context.Context, stdin string, args ...string) (string, error) {
	return u.run(ctx, strings.NewReader(stdin), args)
}

func (u *User) run(ctx context.Context, stdin io.Reader, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, u.kubectl, append([]string{"--kubeconfig", u.Kubeconfig}, args...)...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s as %s: %w: %s", strings.Join(args, " "), u.Username(), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Access is one thing a user may or may not do in the user's namespace.
type Access struct {
	Verb, Group, Resource, Subresource string
}

func (a Access) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	return a.Verb + " " + r
}

// WaitAllowed polls SubjectAccessReviews until the user may do each of
// want in the user's namespace, or ctx ends.
func (u *User) WaitAllowed(ctx context.Context, want ...Access) error {
	for _, a := range want {
		err := Poll(ctx, func() error {
			allowed, err := u.allowed(ctx, a)
			if err != nil {
				return err
			}
			if !allowed {
				return fmt.Errorf("%s may not %s yet", u.Username(), a)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (u *User) allowed(ctx context.Context, a Access) (bool, error) {
	review, err := u.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   u.Username(),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + u.Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: u.Namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing whether %s may %s: %w", u.Username(), a, err)
	}
	return review.Status.Allowed, nil
}
