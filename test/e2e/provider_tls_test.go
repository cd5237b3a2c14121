package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/internal/devca"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
	"github.com/sluice-dev/sluice/test/harness"
)

// The provider TLS tests run their own providers (test/fakecheck serving
// TLS with certificates from CAs of their own) and put the CA bundles and
// client certificates their AdmissionChecks name into Secrets in sluice's
// namespace, as an operator would.

// secretReaction bounds how long the admitter may take to probe a check
// again after a Secret it names changed: well inside the 30s probe
// interval, so only the reaction to the Secret meets it.
const secretReaction = 10 * time.Second

// x509UnknownAuthority is what Go's TLS says of a certificate from a CA
// the bundle does not hold.
const x509UnknownAuthority = "x509: certificate signed by unknown authority"

func newCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.New(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// putSecret creates or replaces Secret name in sluice's namespace, and
// deletes it when the test ends.
func putSecret(ctx context.Context, t *testing.T, name string, typ corev1.SecretType, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.SystemNamespace}, Type: typ, Data: data}
	err := k8s.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		err = k8s.Update(ctx, s)
	} else if err == nil {
		t.Cleanup(func() {
			if err := k8s.Delete(context.Background(), s); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting Secret %s: %v", name, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("putting Secret %s/%s: %v", harness.SystemNamespace, name, err)
	}
}

// tlsProvider starts a fake provider serving TLS with a certificate from
// ca; with clientCA it requires client certificates clientCA signs.
func tlsProvider(t *testing.T, ca, clientCA *devca.CA, opts ...fakecheck.Option) *fakecheck.Provider {
	t.Helper()
	var clientCAs []byte
	if clientCA != nil {
		clientCAs = clientCA.CertPEM
	}
	cfg, err := fakecheck.LoopbackTLS(ca, clientCAs)
	if err != nil {
		t.Fatal(err)
	}
	return fakecheck.StartT(t, append(opts, fakecheck.WithTLS(cfg))...)
}

// waitCheckActivityWithin is waitCheckActivity with a deadline of limit.
func waitCheckActivityWithin(ctx context.Context, t *testing.T, name, what string, limit time.Duration, ok func(*metav1.Condition) bool) {
	t.Helper()
	var ac sluicev1alpha1.AdmissionCheck
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(ac.Status.Conditions, sluicev1alpha1.AdmissionCheckActive)
		return c != nil && ok(c), nil
	})
	if err != nil {
		t.Fatalf("AdmissionCheck %s not %s within %s: conditions %v", name, what, limit, ac.Status.Conditions)
	}
}

func activeFor(reason string, message ...string) func(*metav1.Condition) bool {
	return func(c *metav1.Condition) bool {
		want := metav1.ConditionFalse
		if reason == "ProviderReady" {
			want = metav1.ConditionTrue
		}
		return c.Status == want && c.Reason == reason && containsAll(c.Message, message...)
	}
}

// TestProviderTLSMutual: a provider that requires client certificates
// admits a pod through an AdmissionCheck whose spec.tls names a CA Secret
// (under a key of its own) and a kubernetes.io/tls client certificate
// Secret. Until the Secrets exist the check is inactive and says which is
// missing; each Secret's creation is seen at once.
func TestProviderTLSMutual(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	providerCA, clientCA := newCA(t, "tls-mutual provider CA"), newCA(t, "tls-mutual admitter CA")
	prov := tlsProvider(t, providerCA, clientCA, fakecheck.WithDefaultAnswer(readyWithLabel("example.com/transport", "mutual-tls")))
	const caSecret, clientSecret = "tls-mutual-ca", "tls-mutual-client"
	check := faultCheck("tls-mutual", prov.Target(), sluicev1alpha1.FailClosed)
	check.Spec.TLS = &sluicev1alpha1.ProviderTLS{
		CASecretRef:                &sluicev1alpha1.SecretKeyReference{Name: caSecret, Key: "bundle.pem"},
		ClientCertificateSecretRef: &sluicev1alpha1.SecretReference{Name: clientSecret},
	}
	mustCreate(ctx, t, check)

	waitCheckActivity(ctx, t, check.Name, "inactive for its missing CA Secret",
		activeFor(sluicev1alpha1.ReasonTLSConfigInvalid, "spec.tls.caSecretRef", "Secret sluice-system/tls-mutual-ca not found"))
	putSecret(ctx, t, caSecret, corev1.SecretTypeOpaque, map[string][]byte{"bundle.pem": providerCA.CertPEM})
	waitCheckActivityWithin(ctx, t, check.Name, "inactive for its missing client certificate Secret", secretReaction,
		activeFor(sluicev1alpha1.ReasonTLSConfigInvalid, "spec.tls.clientCertificateSecretRef", "Secret sluice-system/tls-mutual-client not found"))

	leaf, err := clientCA.Issue(devca.Request{CommonName: "sluice-admitter", Life: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	putSecret(ctx, t, clientSecret, corev1.SecretTypeTLS, map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM})
	waitCheckActivityWithin(ctx, t, check.Name, "active over mutual TLS", secretReaction, activeFor("ProviderReady", fakecheck.ProviderName))

	ns := createNamespace(ctx, t, "tls-mutual")
	createQueues(ctx, t, ns, "tls-mutual", "1", check.Name)
	pod := newPod(ns, "mutual", "100m", "1s")
	createFaultPod(ctx, t, pod)
	final := waitPod(ctx, t, pod, "ungated by the provider over mutual TLS", func(p *corev1.Pod) bool { return !hasGate(p) })
	if got := final.Labels["example.com/transport"]; got != "mutual-tls" {
		t.Errorf("pod label example.com/transport = %q, want the provider's update mutual-tls", got)
	}
	wl := waitWorkloadOf(ctx, t, pod, "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	if st := checkState(wl, check.Name); st == nil || st.State != sluicev1alpha1.CheckStateReady || st.Reason != "Placed" {
		t.Errorf("check state = %+v, want Ready with the provider's reason Placed", st)
	}
	if n := prov.EvaluateCount(ns, wl.Name); n == 0 {
		t.Error("the provider recorded no Evaluate call for the admitted workload")
	}
}

// TestProviderTLSWrongCA: a provider whose certificate does not verify
// against the check's CA Secret never admits, although the check's
// failurePolicy is Ignore. The check, its ClusterQueue and the waiting
// workload say why (the TLS reason and the x509 error). Fixing the Secret
// admits the workload; breaking it again while a second workload is in the
// check phase leaves that one Pending, never asked, until it is fixed
// once more.
func TestProviderTLSWrongCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	providerCA, wrongCA := newCA(t, "tls-wrong provider CA"), newCA(t, "tls-wrong other CA")
	prov := tlsProvider(t, providerCA, nil) // PENDING until the test says otherwise
	const caSecret = "tls-wrong-ca"
	putSecret(ctx, t, caSecret, corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": wrongCA.CertPEM})
	check := faultCheck("tls-wrong-ca", prov.Target(), sluicev1alpha1.IgnoreFailure)
	check.Spec.TLS = &sluicev1alpha1.ProviderTLS{CASecretRef: &sluicev1alpha1.SecretKeyReference{Name: caSecret}}
	mustCreate(ctx, t, check)
	unverified := activeFor(sluicev1alpha1.ReasonTLSHandshakeFailed, "TLS handshake with the provider failed", x509UnknownAuthority)
	waitCheckActivity(ctx, t, check.Name, "inactive for the certificate it cannot verify", unverified)

	ns := createNamespace(ctx, t, "tls-wrong")
	createQueues(ctx, t, ns, "tls-wrong-ca", "1", check.Name)
	rec := recordEvents(ctx, t, ns, "tls-wrong-ca")
	defer rec.stop()
	waitClusterQueue(ctx, t, "tls-wrong-ca", "Active=False naming the check and the TLS failure", func(cq *sluicev1alpha1.ClusterQueue) bool {
		c := meta.FindStatusCondition(cq.Status.Conditions, sluicev1alpha1.ClusterQueueActive)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "AdmissionCheckInactive" &&
			containsAll(c.Message, "admission check "+check.Name, sluicev1alpha1.ReasonTLSHandshakeFailed, x509UnknownAuthority)
	})

	// A workload waits, saying why; nothing reaches the provider.
	first := newPod(ns, "first", "100m", "1s")
	createFaultPod(ctx, t, first)
	gate := watchGate(ctx, t, first)
	wl := waitWorkloadOf(ctx, t, first, "waiting, naming the check and the TLS failure", func(w *sluicev1alpha1.Workload) bool {
		c := meta.FindStatusCondition(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Status == metav1.ConditionFalse &&
			containsAll(c.Message, "admission check "+check.Name, sluicev1alpha1.ReasonTLSHandshakeFailed, x509UnknownAuthority)
	})
	gate.assertGatedThroughout(ctx, t)
	if n := len(prov.Calls()); n != 0 {
		t.Errorf("the provider recorded %d Evaluate calls through a certificate that did not verify", n)
	}

	// The right CA admits it.
	prov.SetAnswer(ns, wl.Name, readyWithLabel("example.com/verified", "first"))
	putSecret(ctx, t, caSecret, corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": providerCA.CertPEM})
	waitCheckActivityWithin(ctx, t, check.Name, "active once its CA Secret is fixed", secretReaction, activeFor("ProviderReady"))
	final := waitPod(ctx, t, first, "ungated once the CA Secret is fixed", func(p *corev1.Pod) bool { return !hasGate(p) })
	if got := final.Labels["example.com/verified"]; got != "first" {
		t.Errorf("pod label example.com/verified = %q, want the provider's update first", got)
	}

	// A second workload is in the check phase when the Secret breaks again.
	second := newPod(ns, "second", "100m", "1s")
	createFaultPod(ctx, t, second)
	wl2 := waitCheckState(ctx, t, second, check.Name, "Pending, held by the provider", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStatePending && st.Reason == "HeldByTest"
	})
	gate2 := watchGate(ctx, t, second)
	putSecret(ctx, t, caSecret, corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": wrongCA.CertPEM})
	waitCheckActivityWithin(ctx, t, check.Name, "inactive again", secretReaction, unverified)
	// The admitter now reads the wrong CA: a READY could only come through
	// a connection that did not verify the provider.
	askedBefore := prov.EvaluateCount(ns, wl2.Name)
	failedBefore, err := checkCallErrors(ctx, check.Name, sluicev1alpha1.ReasonTLSHandshakeFailed)
	if err != nil {
		t.Fatal(err)
	}
	prov.SetAnswer(ns, wl2.Name, readyWithLabel("example.com/verified", "second"))
	wl2 = waitCheckState(ctx, t, second, check.Name, "Pending for the TLS failure, not ignored", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStatePending && st.Reason == sluicev1alpha1.ReasonTLSHandshakeFailed &&
			containsAll(st.Message, x509UnknownAuthority, "not ignored: failurePolicy Ignore does not cover TLS failures")
	})
	c := meta.FindStatusCondition(wl2.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != sluicev1alpha1.ReasonWaitingForChecks ||
		!containsAll(c.Message, check.Name, sluicev1alpha1.ReasonTLSHandshakeFailed, x509UnknownAuthority) {
		t.Errorf("Admitted condition = %+v, want False, %s, naming %s, the TLS reason and the x509 error", c, sluicev1alpha1.ReasonWaitingForChecks, check.Name)
	}
	// The admitter keeps asking, and keeps failing the handshake.
	waitCheckCallErrors(ctx, t, check.Name, sluicev1alpha1.ReasonTLSHandshakeFailed, failedBefore+3)
	gate2.assertGatedThroughout(ctx, t)
	if n := prov.EvaluateCount(ns, wl2.Name); n != askedBefore {
		t.Errorf("the provider answered %d calls for %s through the wrong CA", n-askedBefore, wl2.Name)
	}
	if n := rec.transitions(wl2.Name, sluicev1alpha1.WorkloadAdmitted); n != 0 {
		t.Errorf("workload %s was admitted %d times while its provider's certificate did not verify", wl2.Name, n)
	}

	putSecret(ctx, t, caSecret, corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": providerCA.CertPEM})
	final = waitPod(ctx, t, second, "ungated once the CA Secret is fixed again", func(p *corev1.Pod) bool { return !hasGate(p) })
	if got := final.Labels["example.com/verified"]; got != "second" {
		t.Errorf("pod label example.com/verified = %q, want the provider's update second", got)
	}
}
