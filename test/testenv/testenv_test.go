package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// shared is the control plane of this test package: API server, scheduler
// and kwok with two nodes.
type shared struct {
	env     *Env
	startup time.Duration
}

var pkg shared

func TestMain(m *testing.M) {
	began := time.Now()
	os.Exit(RunMain(m, Options{Scheduler: true, Kwok: true, Nodes: 2}, func(e *Env) error {
		pkg = shared{env: e, startup: time.Since(began)}
		return nil
	}))
}

const (
	runForAnnotation    = "kwok.sluice.dev/run-for"
	failAfterAnnotation = "kwok.sluice.dev/fail-after"
	foreignFinalizer    = "kueue.x-k8s.io/managed"
)

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := pkg.env.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// namespace creates a namespace for one test.
func namespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	name := "t-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

func newPod(name string, annotations map[string]string, finalizers ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Finalizers: finalizers},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "registry.invalid/sleep:1"}},
		},
	}
}

// waitPod polls the pod until cond holds or the deadline passes.
func waitPod(t *testing.T, cs kubernetes.Interface, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var last *corev1.Pod
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		} else if ctx.Err() == nil && !apierrors.IsNotFound(err) {
			t.Fatalf("get pod %s/%s: %v", ns, name, err)
		}
		select {
		case <-ctx.Done():
			if last != nil {
				t.Fatalf("pod %s/%s: %s: not reached before deadline; phase %q, node %q, conditions %+v",
					ns, name, what, last.Status.Phase, last.Spec.NodeName, last.Status.Conditions)
			}
			t.Fatalf("pod %s/%s: %s: not reached before deadline", ns, name, what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestStartupTime(t *testing.T) {
	if pkg.startup <= 0 {
		t.Fatal("startup time was not recorded")
	}
	t.Logf("control plane with scheduler, kwok and 2 nodes ready in %s", pkg.startup.Round(time.Millisecond))
}

func TestRunForPodIsScheduledAndSucceeds(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	pod := newPod("run-for", map[string]string{runForAnnotation: "1s"})
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	running := waitPod(t, cs, ns, pod.Name, "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podReady(p) || p.Status.Phase == corev1.PodSucceeded
	})
	seenRunning := time.Now()
	if running.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod was never seen Running; phase %s", running.Status.Phase)
	}
	if running.Spec.NodeName == "" {
		t.Fatal("pod runs without a node")
	}
	node, err := cs.CoreV1().Nodes().Get(t.Context(), running.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[NodeLabel] != NodeLabelValue {
		t.Errorf("pod scheduled to node %s with labels %v, want a kwok node", node.Name, node.Labels)
	}

	done := waitPod(t, cs, ns, pod.Name, "Succeeded", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded
	})
	// Both observations lag by at most one poll, so the pod ran for at
	// least this long minus that slack.
	if observed := time.Since(seenRunning); observed < 900*time.Millisecond {
		t.Errorf("pod succeeded %s after it was seen Running, want about the annotated 1s", observed)
	}
	if got := done.Status.ContainerStatuses; len(got) != 1 || got[0].State.Terminated == nil || got[0].State.Terminated.ExitCode != 0 {
		t.Errorf("container statuses %+v, want one terminated with exit code 0", got)
	}
	ran := done.Status.ContainerStatuses[0].State.Terminated.FinishedAt.Sub(done.Status.StartTime.Time)
	if ran < time.Second {
		t.Errorf("pod ran for %s, want at least the annotated 1s", ran)
	}
}

func TestRunForClockSurvivesUpdates(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	pod := newPod("updated", map[string]string{runForAnnotation: "2s"})
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, pod.Name, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	seenRunning := time.Now()

	// kwok recomputes the delay on every update; the pod must still end
	// within a second of its due time however often it is touched.
	const limit = 2*time.Second + time.Second + 500*time.Millisecond
	for i := 0; ; i++ {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded {
			break
		}
		if time.Since(seenRunning) > limit {
			t.Fatalf("pod still %s %s after it was seen Running, want Succeeded within %s", p.Status.Phase, time.Since(seenRunning), limit)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{"touch":"%d"}}}`, i)
		if _, err := cs.CoreV1().Pods(ns).Patch(t.Context(), pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the update rate, not a wait for a condition
	}
	if observed := time.Since(seenRunning); observed < 1900*time.Millisecond {
		t.Errorf("pod succeeded %s after it was seen Running, want the annotated 2s", observed)
	}
}

func TestFailAfterPodFails(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	pod := newPod("fail-after", map[string]string{failAfterAnnotation: "500ms"})
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, pod.Name, "Running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning
	})
	seenRunning := time.Now()
	failed := waitPod(t, cs, ns, pod.Name, "Failed", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed
	})
	if observed := time.Since(seenRunning); observed < 400*time.Millisecond {
		t.Errorf("pod failed %s after it was seen Running, want about the annotated 500ms", observed)
	}
	if got := failed.Status.ContainerStatuses; len(got) != 1 || got[0].State.Terminated == nil || got[0].State.Terminated.ExitCode == 0 {
		t.Errorf("container statuses %+v, want one terminated with a non-zero exit code", got)
	}
}

func TestPlainPodRunsUntilDeleted(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	pod := newPod("plain", nil)
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitPod(t, cs, ns, pod.Name, "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podReady(p)
	})
	if running.Status.PodIP == "" || running.Status.StartTime == nil {
		t.Errorf("running pod lacks podIP or startTime: %+v", running.Status)
	}
	// A graceful delete of a pod without finalizers ends with the object
	// gone, as with a kubelet.
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cs, ns, pod.Name)
}

func TestDeletionKeepsForeignFinalizer(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	pod := newPod("finalized", nil, foreignFinalizer)
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, pod.Name, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// kwok reports the containers killed and deletes with grace 0, but the
	// pod must stay until its owner drops the finalizer.
	terminating := waitPod(t, cs, ns, pod.Name, "Failed with deletion grace 0", func(p *corev1.Pod) bool {
		g := p.DeletionGracePeriodSeconds
		return p.Status.Phase == corev1.PodFailed && g != nil && *g == 0
	})
	if !slices.Equal(terminating.Finalizers, []string{foreignFinalizer}) {
		t.Fatalf("finalizers %v after kwok's delete, want [%s] kept", terminating.Finalizers, foreignFinalizer)
	}

	terminating.Finalizers = nil
	if _, err := cs.CoreV1().Pods(ns).Update(t.Context(), terminating, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("remove finalizer: %v", err)
	}
	waitGone(t, cs, ns, pod.Name)
}

func waitGone(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s still exists (last error %v)", ns, name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestSchedulingV1alpha2IsServed(t *testing.T) {
	cs := clientset(t)
	res, err := cs.Discovery().ServerResourcesForGroupVersion(schedulingv1alpha2.SchemeGroupVersion.String())
	if err != nil {
		t.Fatalf("discovery of %s: %v", schedulingv1alpha2.SchemeGroupVersion, err)
	}
	var names []string
	for _, r := range res.APIResources {
		names = append(names, r.Name)
	}
	for _, want := range []string{"workloads", "podgroups"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s serves %v, want %s", schedulingv1alpha2.SchemeGroupVersion, names, want)
		}
	}

	ns := namespace(t, cs)
	wl := &schedulingv1alpha2.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: "gang"},
		Spec: schedulingv1alpha2.WorkloadSpec{PodGroupTemplates: []schedulingv1alpha2.PodGroupTemplate{{
			Name:             "workers",
			SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 3}},
		}}},
	}
	got, err := cs.SchedulingV1alpha2().Workloads(ns).Create(t.Context(), wl, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Workload: %v", err)
	}
	if g := got.Spec.PodGroupTemplates[0].SchedulingPolicy.Gang; g == nil || g.MinCount != 3 {
		t.Errorf("stored gang policy %+v, want minCount 3", g)
	}
}

func TestMetricsCountPodCreates(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	before, err := pkg.env.RequestCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"m-0", "m-1", "m-2"} {
		if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), newPod(name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := pkg.env.RequestCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var creates float64
	for _, r := range SubtractCounts(after, before) {
		if r.IsWrite() && r.Verb == "POST" && r.Resource == "pods" && r.Subresource == "" {
			creates += r.Count
		}
	}
	if creates < 3 {
		t.Errorf("apiserver_request_total counted %v pod creates, want at least 3", creates)
	}
}

func TestStartStop(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		procs int
		check func(t *testing.T, cs kubernetes.Interface)
	}{
		{name: "API only", opts: Options{}, procs: 2},
		{
			name:  "all components",
			opts:  Options{Scheduler: true, ControllerManager: true, Kwok: true, Nodes: 1},
			procs: 5,
			check: checkControllerManager,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			env, err := Start(t.Context(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: control plane ready in %s", tt.name, time.Since(began).Round(time.Millisecond))
			t.Cleanup(func() { _ = env.Stop() })
			cs, err := env.Clientset()
			if err != nil {
				t.Fatal(err)
			}
			v, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if v.GitVersion != "v1.36.3" {
				t.Errorf("server version %q, want v1.36.3", v.GitVersion)
			}
			if env.APIServerURL == pkg.env.APIServerURL {
				t.Errorf("second control plane shares the API server %s", env.APIServerURL)
			}
			if tt.check != nil {
				tt.check(t, cs)
			}

			pids := make([]int, 0, len(env.procs))
			for _, p := range env.procs {
				pids = append(pids, p.cmd.Process.Pid)
			}
			if len(pids) != tt.procs {
				t.Errorf("control plane runs %d processes, want %d", len(pids), tt.procs)
			}
			if err := env.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := env.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("process %d still exists after Stop (kill -0: %v)", pid, err)
				}
			}
			if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
				t.Errorf("state dir %s still exists after Stop (stat: %v)", env.Dir, err)
			}
		})
	}
}

// checkControllerManager asserts the controllers sluice relies on work:
// service accounts in new namespaces and garbage collection by owner.
func checkControllerManager(t *testing.T, cs kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ns := namespace(t, cs)
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
	}}}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, owned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for sa, gone := false, false; !sa || !gone; {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		sa = err == nil
		_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, owned.Name, metav1.GetOptions{})
		gone = apierrors.IsNotFound(err)
		select {
		case <-ctx.Done():
			t.Fatalf("default ServiceAccount created: %v; owned ConfigMap collected: %v", sa, gone)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "zero value", opts: Options{}},
		{name: "all components", opts: Options{Scheduler: true, ControllerManager: true, Kwok: true, Nodes: 3}},
		{name: "negative nodes", opts: Options{Nodes: -1}, wantErr: "Nodes must not be negative"},
		{name: "negative pods", opts: Options{Node: NodeShape{Pods: -5}}, wantErr: "Node.Pods must not be negative"},
		{name: "port out of range", opts: Options{Ports: Ports{APIServer: 70000}}, wantErr: "Ports.APIServer must be within 0..65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validate(withDefaults(tt.opts))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseAndSubtractCounts(t *testing.T) {
	const text = `# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 9
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 3
`
	// The dry-run creates and the cluster-wide lists are series of their
	// own: they neither hide nor are taken for the others.
	before := []RequestCount{
		{Verb: "POST", Resource: "pods", Version: "v1", Scope: "resource", Code: "201", Count: 5},
		{Verb: "LIST", Resource: "pods", Version: "v1", Scope: "namespace", Code: "200", Count: 2},
		{Verb: "LIST", Resource: "pods", Version: "v1", Scope: "cluster", Code: "200", Count: 1},
		{Verb: "POST", Resource: "pods", Version: "v1", Scope: "resource", DryRun: "All", Code: "201", Count: 1},
	}
	after, err := ParseRequestCounts(text)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		verb, subresource, dryRun string
		want                      float64
		write                     bool
	}{
		{verb: "POST", want: 2, write: true},
		{verb: "POST", dryRun: "All", want: 2},
		{verb: "PATCH", subresource: "status", want: 4, write: true},
		{verb: "LIST", want: 8},
	}
	diff := SubtractCounts(after, before)
	for _, tt := range tests {
		var got float64
		for _, r := range diff {
			if r.Verb == tt.verb && r.Subresource == tt.subresource && r.DryRun == tt.dryRun {
				got += r.Count
				if r.IsWrite() != tt.write {
					t.Errorf("%s IsWrite = %v, want %v", tt.verb, r.IsWrite(), tt.write)
				}
			}
		}
		if got != tt.want {
			t.Errorf("%s %s: delta %v, want %v", tt.verb, tt.subresource, got, tt.want)
		}
	}
	if _, err := ParseRequestCounts("# no series\n"); err == nil {
		t.Error("metrics text without apiserver_request_total parsed without error")
	}
}

func TestStartReportsTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	// Every port is fixed, so there is nothing to retry with.
	ports, err := allocatePorts(Ports{APIServer: taken})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(t.Context(), Options{Ports: ports})
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("Start with API server port %d in use: error %v, want errPortTaken", taken, err)
	}
	if !strings.Contains(err.Error(), "kube-apiserver.log") {
		t.Errorf("error does not name the API server's log: %v", err)
	}
}
