// Command knativevalidate runs Knative's own admission logic (the defaulting and validating
// webhooks' SetDefaults + Validate, from knative.dev/serving and knative.dev/eventing) on
// manifests, without a cluster. The test control plane has Knative's CRDs but no Knative
// webhook, so this is what checks what only the webhook would reject.
//
// Input on stdin: a JSON array of objects. Output on stdout: a JSON array with one
// {"kind", "name", "checked", "error"} per object; objects of kinds it does not know are
// reported with checked=false. Exit status 0 even when objects are invalid (the caller
// asserts); 2 on bad input.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"knative.dev/pkg/apis"

	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

type resource interface {
	apis.Defaultable
	apis.Validatable
}

type result struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Checked bool   `json:"checked"`
	Error   string `json:"error,omitempty"`
}

func newResource(apiVersion, kind string) resource {
	switch apiVersion + "/" + kind {
	case "serving.knative.dev/v1/Service":
		return &servingv1.Service{}
	case "sources.knative.dev/v1/ApiServerSource":
		return &sourcesv1.ApiServerSource{}
	case "sources.knative.dev/v1/PingSource":
		return &sourcesv1.PingSource{}
	}
	return nil
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var objects []json.RawMessage
	if err := json.Unmarshal(input, &objects); err != nil {
		fmt.Fprintln(os.Stderr, "stdin must be a JSON array of objects:", err)
		os.Exit(2)
	}
	results := make([]result, 0, len(objects))
	for _, raw := range objects {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		r := result{Kind: head.Kind, Name: head.Metadata.Name}
		obj := newResource(head.APIVersion, head.Kind)
		if obj != nil {
			r.Checked = true
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				r.Error = "decode: " + err.Error()
			} else {
				// As the webhooks do on create: defaulting first, then validation.
				ctx := apis.WithinCreate(context.Background())
				obj.SetDefaults(ctx)
				if fe := obj.Validate(ctx); fe != nil {
					r.Error = fe.Error()
				}
			}
		}
		results = append(results, r)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
