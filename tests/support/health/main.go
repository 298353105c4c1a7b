// Command tether-health says what Argo CD and Flux conclude about Kubernetes objects:
//
//   - Argo CD: the health Lua script an argocd-cm ConfigMap holds for the object's kind
//     (`resource.customizations.health.<group>_<kind>`), run the way Argo CD runs it
//     (github.com/argoproj/argo-cd util/lua/lua.go: gopher-lua without the standard libraries
//     unless `resource.customizations.useOpenLibs.<group>_<kind>` is "true", then package, base
//     and table; the object as the global `obj`, integers as numbers; a one-second limit; the
//     returned table's status must be a known health code, else Unknown);
//   - Flux: kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute), which Flux's health
//     checks and `kubectl wait`-style tools use.
//
// Usage: tether-health ARGOCD_CM.json < OBJECTS.json
//
// OBJECTS.json is one object or a List (`kubectl get -o json`). Prints one JSON line per object:
// {"kind", "name", "argocd": {"status", "message"}, "kstatus": {"status", "message"}}.
// Argo CD's safe `os` library is not loaded (Tether's scripts do not use it): a script calling
// `os` fails here, which is stricter than Argo CD, never looser.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type line struct {
	Kind    string  `json:"kind"`
	Name    string  `json:"name"`
	ArgoCD  verdict `json:"argocd"`
	KStatus verdict `json:"kstatus"`
}

// Argo CD's health codes (gitops-engine pkg/health).
var healthCodes = map[string]bool{"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true, "Degraded": true, "Missing": true}

// decodeValue is Argo CD's: JSON values as Lua values, integers (int64 in unstructured) as numbers.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

func argoHealth(obj *unstructured.Unstructured, cm map[string]string) (verdict, error) {
	groupKind := obj.GroupVersionKind().Group + "_" + obj.GetKind()
	script, ok := cm["resource.customizations.health."+groupKind]
	if !ok || script == "" {
		// Argo CD without a health check for a custom resource: no health, reported Healthy.
		return verdict{Status: "(none)", Message: "no health check for " + groupKind}, nil
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: cm["resource.customizations.useOpenLibs."+groupKind] != "true"})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return verdict{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj.Object))
	if err := l.DoString(script); err != nil {
		return verdict{}, err
	}
	returned, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return verdict{}, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	out := verdict{Status: lua.LVAsString(returned.RawGetString("status")), Message: lua.LVAsString(returned.RawGetString("message"))}
	if !healthCodes[out.Status] {
		return verdict{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return out, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tether-health ARGOCD_CM.json < OBJECTS.json")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tether-health:", err)
		os.Exit(1)
	}
}

func run(cmPath string, in io.Reader, out io.Writer) error {
	raw, err := os.ReadFile(cmPath)
	if err != nil {
		return err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(raw, &cm); err != nil {
		return fmt.Errorf("%s: %w", cmPath, err)
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var top unstructured.Unstructured
	if err := top.UnmarshalJSON(data); err != nil {
		return err
	}
	objects := []unstructured.Unstructured{top}
	if top.IsList() {
		list, err := top.ToList()
		if err != nil {
			return err
		}
		objects = list.Items
	}
	enc := json.NewEncoder(out)
	for i := range objects {
		obj := &objects[i]
		argo, err := argoHealth(obj, cm.Data)
		if err != nil {
			return fmt.Errorf("%s %s: Argo CD health: %w", obj.GetKind(), obj.GetName(), err)
		}
		res, err := status.Compute(obj)
		if err != nil {
			return fmt.Errorf("%s %s: kstatus: %w", obj.GetKind(), obj.GetName(), err)
		}
		if err := enc.Encode(line{obj.GetKind(), obj.GetName(), argo, verdict{res.Status.String(), res.Message}}); err != nil {
			return err
		}
	}
	return nil
}
