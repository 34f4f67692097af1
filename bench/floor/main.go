// floor: the client-side floor of figure 8 (bench/figures/f08_big_jobs.py, bench/floor.py).
//
// It makes exactly the calls podsweeper makes for a finished job whose pods are still there,
// and nothing else: GET the job, LIST its pods by label selector
// training.kubeflow.org/job-name=<name> in pages of 500 (following continue), then DELETE
// each pod with uid + resourceVersion preconditions, 16 at once, under a client-side token
// bucket of QPS 100 / burst 600 (podsweeper's defaults, function/podsweeper/config.py). What
// it costs is what any client must cost; podsweeper's time over this program's is what
// podsweeper adds.
//
// Client: client-go's REST client with JSON, not the dynamic client. podsweeper speaks JSON
// (Accept and Content-Type application/json) and keeps answers as bytes until its typed edge
// reads them; the REST client sends the same requests and hands back the raw bytes, while the
// dynamic client would decode every DELETE answer into a map that nothing reads. The LIST
// pages are read into a struct of the four fields needed (name, uid, resourceVersion,
// continue). The transport is HTTP/1.1 keep-alive like podsweeper's urllib3 pool (client-go
// would otherwise negotiate HTTP/2); --http2 measures client-go's default instead.
//
// With --wait-go it loads the kubeconfig, warms its connections with GETs of the job (one per
// concurrent worker, so the pool is as warm as a serving podsweeper's), prints {"ready": true}
// and waits for a line "go" on stdin: the caller times only the calls. It ends with one JSON
// line on stdout: pods listed, deleted, 404s, 409s, seconds and its CPU seconds over the calls
// (getrusage). Any other answer, or a bad flag, exits non-zero with the reason on stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	jobNameLabel = "training.kubeflow.org/job-name"
	pageSize     = 500 // podsweeper's PAGE_SIZE (function/podsweeper/cluster/kube/calls.py)
	jsonType     = "application/json"
)

type options struct {
	kubeconfig, namespace, job string
	group, version, plural     string
	concurrency                int
	qps                        float64
	burst                      int
	waitGo, http2              bool
	timeout                    time.Duration
}

type pod struct {
	name, uid, resourceVersion string
}

type page struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name            string `json:"name"`
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"items"`
}

type result struct {
	Listed     int     `json:"listed"`
	Deleted    int     `json:"deleted"`
	NotFound   int     `json:"not_found"`
	Conflict   int     `json:"conflict"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Requests   int     `json:"requests"`
}

func main() {
	opts := parseFlags()
	if err := run(opts); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default $KUBECONFIG)")
	flag.StringVar(&o.namespace, "namespace", "", "the job's namespace")
	flag.StringVar(&o.job, "job", "", "the job's name")
	flag.StringVar(&o.group, "group", "kubeflow.org", "the job's API group")
	flag.StringVar(&o.version, "version", "v1", "the job's API version")
	flag.StringVar(&o.plural, "plural", "pytorchjobs", "the job's resource (plural)")
	flag.IntVar(&o.concurrency, "concurrency", 16, "DELETEs in flight at once")
	flag.Float64Var(&o.qps, "qps", 100, "client-side rate limit, requests per second (podsweeper: PODSWEEPER_KUBE_API_QPS)")
	flag.IntVar(&o.burst, "burst", 600, "client-side burst (podsweeper: PODSWEEPER_KUBE_API_BURST)")
	flag.BoolVar(&o.waitGo, "wait-go", false, `warm up, print {"ready": true}, then wait for "go" on stdin`)
	flag.BoolVar(&o.http2, "http2", false, "let client-go negotiate HTTP/2 (default: HTTP/1.1, as podsweeper)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	var missing []string
	for _, f := range []struct{ name, value string }{{"--kubeconfig", o.kubeconfig}, {"--namespace", o.namespace}, {"--job", o.job}} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 || flag.NArg() > 0 || o.concurrency < 1 || o.qps <= 0 || o.burst < 1 {
		fmt.Fprintf(os.Stderr, "floor: needs --kubeconfig, --namespace and --job (missing %s), concurrency >= 1, qps > 0, burst >= 1, no arguments\n", strings.Join(missing, " "))
		flag.Usage()
		os.Exit(2)
	}
	return o
}

func client(o options) (*rest.RESTClient, error) {
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", o.kubeconfig, err)
	}
	config.QPS, config.Burst = float32(o.qps), o.burst
	config.ContentType, config.AcceptContentTypes = jsonType, jsonType
	config.UserAgent = "podsweeper-floor"
	if !o.http2 {
		config.NextProtos = []string{"http/1.1"}
	}
	config.APIPath = "/"
	config.GroupVersion = &schema.GroupVersion{}
	// Answers are read as bytes: the serializer is only asked to decode error Status bodies.
	config.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	return rest.RESTClientFor(config)
}

// call makes one request and returns its status code and body; transport errors are errors.
func call(ctx context.Context, req *rest.Request) (int, []byte, error) {
	var code int
	res := req.Do(ctx).StatusCode(&code)
	body, err := res.Raw()
	if code == 0 && err != nil {
		return 0, nil, err
	}
	return code, body, nil
}

func failed(what string, code int, body []byte) error {
	text := string(body)
	if len(text) > 300 {
		text = text[:300]
	}
	return fmt.Errorf("%s: API answered %d: %s", what, code, text)
}

func run(o options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	c, err := client(o)
	if err != nil {
		return err
	}
	jobPath := fmt.Sprintf("/apis/%s/%s/namespaces/%s/%s/%s", o.group, o.version, url.PathEscape(o.namespace), o.plural, url.PathEscape(o.job))
	podsPath := fmt.Sprintf("/api/v1/namespaces/%s/pods", url.PathEscape(o.namespace))
	getJob := func() error {
		code, body, err := call(ctx, c.Get().AbsPath(jobPath))
		if err != nil {
			return fmt.Errorf("get %s: %w", jobPath, err)
		}
		if code != 200 {
			return failed("get "+jobPath, code, body)
		}
		return nil
	}

	if o.waitGo {
		warm := make(chan error, o.concurrency)
		for range o.concurrency {
			go func() { warm <- getJob() }()
		}
		for range o.concurrency {
			if err := <-warm; err != nil {
				return fmt.Errorf("warming up: %w", err)
			}
		}
		fmt.Println(`{"ready": true}`)
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(line) != "go" {
			return fmt.Errorf("waited for a line \"go\" on stdin, got %q (%v)", line, err)
		}
	}

	var out result
	cpu0 := cpuSeconds()
	started := time.Now()

	if err := getJob(); err != nil {
		return err
	}
	out.Requests++
	var pods []pod
	token := ""
	for {
		req := c.Get().AbsPath(podsPath).
			Param("labelSelector", jobNameLabel+"="+o.job).
			Param("limit", fmt.Sprint(pageSize))
		if token != "" {
			req = req.Param("continue", token)
		}
		code, body, err := call(ctx, req)
		out.Requests++
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		if code != 200 {
			return failed("list pods of "+o.job, code, body)
		}
		var p page
		if err := json.Unmarshal(body, &p); err != nil {
			return fmt.Errorf("list pods: reading the page: %w", err)
		}
		for _, item := range p.Items {
			pods = append(pods, pod{item.Metadata.Name, item.Metadata.UID, item.Metadata.ResourceVersion})
		}
		if token = p.Metadata.Continue; token == "" {
			break
		}
	}
	out.Listed = len(pods)

	work := make(chan pod)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(o.concurrency, max(1, len(pods))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				code, body, err := deletePod(ctx, c, podsPath, p)
				mu.Lock()
				out.Requests++
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("delete pod %s: %w", p.name, err))
				case code == 200 || code == 202:
					out.Deleted++
				case code == 404:
					out.NotFound++
				case code == 409:
					out.Conflict++
				default:
					errs = append(errs, failed("delete pod "+p.name, code, body))
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()

	out.Seconds = time.Since(started).Seconds()
	out.CPUSeconds = cpuSeconds() - cpu0
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d deletes failed, first: %w", len(errs), len(pods), errs[0])
	}
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

func deletePod(ctx context.Context, c *rest.RESTClient, podsPath string, p pod) (int, []byte, error) {
	preconditions := map[string]string{"uid": p.uid}
	if p.resourceVersion != "" {
		preconditions["resourceVersion"] = p.resourceVersion
	}
	body, err := json.Marshal(map[string]any{"preconditions": preconditions})
	if err != nil {
		return 0, nil, err
	}
	// The REST client sets no Content-Type for a []byte body; podsweeper sends one.
	return call(ctx, c.Delete().AbsPath(podsPath, url.PathEscape(p.name)).SetHeader("Content-Type", jsonType).Body(body))
}

// cpuSeconds is this process's user + system CPU time so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return -1
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}
