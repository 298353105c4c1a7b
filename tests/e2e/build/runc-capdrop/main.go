// Command runc-capdrop is a runc wrapper for machines whose capability bounding
// set lacks capabilities that a privileged container asks for (measured on the
// e2e machines: CAP_SYS_RESOURCE). runc refuses such a spec ("unable to apply
// caps: operation not permitted"), so `docker run --privileged` and kind node
// containers, and privileged pods inside them, cannot start.
//
// On `create` and `run` it removes from the bundle's config.json (on `exec`, from
// the --process file) every capability the calling process's bounding set does
// not hold, then execs the real runc (RUNC_CAPDROP_REAL, else the first of /usr/local/sbin/runc, /usr/local/bin/runc, /usr/bin/runc, /usr/sbin/runc). Where
// the bounding set is complete it changes nothing.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames maps capability numbers to the names used in OCI specs.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// missingCaps lists the known capabilities absent from this process's bounding set.
func missingCaps() map[string]bool {
	missing := map[string]bool{}
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return missing
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "CapBnd:") {
			continue
		}
		bnd, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "CapBnd:")), 16, 64)
		if err != nil {
			return missing
		}
		for i, name := range capNames {
			if bnd&(1<<uint(i)) == 0 {
				missing[name] = true
			}
		}
	}
	return missing
}

// specFile finds the JSON whose capabilities runc will apply: the bundle's
// config.json for create/run (--bundle/-b, default cwd), the --process file for
// exec. The bool says whether that file is a whole spec (true) or a process.
func specFile(args []string) (path string, whole bool, ok bool) {
	command, bundle, process := "", ".", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case command == "" && (a == "create" || a == "run" || a == "exec"):
			command = a
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			bundle = args[i+1]
			i++
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		case (a == "--process" || a == "-p") && i+1 < len(args):
			process = args[i+1]
			i++
		case strings.HasPrefix(a, "--process="):
			process = strings.TrimPrefix(a, "--process=")
		}
	}
	switch {
	case command == "create" || command == "run":
		return filepath.Join(bundle, "config.json"), true, true
	case command == "exec" && process != "":
		return process, false, true
	}
	return "", false, false
}

func filterSpec(path string, whole bool, missing map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	process := spec
	if whole {
		process, _ = spec["process"].(map[string]any)
	}
	if process == nil {
		return nil
	}
	changed := false
	if missing["CAP_SYS_RESOURCE"] {
		if adj, ok := process["oomScoreAdj"].(float64); ok {
			if own, err := ownOOMScoreAdj(); err == nil && adj < own {
				process["oomScoreAdj"] = own
				changed = true
			}
		}
	}
	caps, _ := process["capabilities"].(map[string]any)
	for set, v := range caps {
		list, _ := v.([]any)
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if name, ok := c.(string); ok && missing[name] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func ownOOMScoreAdj() (float64, error) {
	data, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
}

func realRunc() string {
	if r := os.Getenv("RUNC_CAPDROP_REAL"); r != "" {
		return r
	}
	for _, p := range []string{"/usr/local/sbin/runc", "/usr/local/bin/runc", "/usr/bin/runc", "/usr/sbin/runc"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "runc"
}

func main() {
	args := os.Args[1:]
	if path, whole, ok := specFile(args); ok {
		if missing := missingCaps(); len(missing) > 0 {
			if err := filterSpec(path, whole, missing); err != nil {
				fmt.Fprintf(os.Stderr, "runc-capdrop: %v\n", err)
				os.Exit(1)
			}
		}
	}
	real := realRunc()
	if err := syscall.Exec(real, append([]string{real}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runc-capdrop: exec %s: %v\n", real, err)
		os.Exit(1)
	}
}
