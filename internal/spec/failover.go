package spec

import (
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// A volume's failover block (docs/BACKUPS.md, "Failover"):
//
//	volumes:
//	  data:
//	    backup: {schedule: {every: 15m}}
//	    failover: {after: 3m}
//
// after is how long the volume's host may be silent before the control
// plane may restore the volume's last backup on another host. The eggs
// mounting such a volume are fenced (contract.WorkloadSpec.Fenced): their
// agent stops them once its reports go unanswered, so that the data never
// runs in two places. The loader and CheckResource apply the same rules
// (FailoverErrors); the plan checks after against the server's settings.

// failoverFields are the settings of a volume's failover block.
var failoverFields = []string{"after"}

// FailoverErrors checks a volume's failover policy as inputs hold it;
// hasBackup says the volume has a backup policy, without which there is
// nothing to fail over from. Field is the key at fault under failover
// ("after"), "" for the block itself.
func FailoverErrors(f inputs.VolumeFailover, hasBackup bool) []*BackupError {
	var errs []*BackupError
	if !hasBackup {
		errs = append(errs, &BackupError{"", "a volume fails over by restoring its last backup elsewhere: add a backup block (backup: {schedule: {every: 15m}}), or remove failover"})
	}
	d, err := time.ParseDuration(f.After)
	switch {
	case f.After == "":
		errs = append(errs, &BackupError{"after", "is missing: write how long the volume's host may be silent before the volume is restored elsewhere, for example 3m"})
	case err != nil:
		errs = append(errs, &BackupError{"after", fmt.Sprintf("%q is not a duration: write a number with a unit (s, m, h), for example 3m", f.After)})
	case d <= 0:
		errs = append(errs, &BackupError{"after", fmt.Sprintf("must be positive, not %s", f.After)})
	}
	return errs
}

// checkFailoverInputs is FailoverErrors for CheckResource.
func checkFailoverInputs(in inputs.Volume) error {
	if in.Failover == nil {
		return nil
	}
	var errs []error
	for _, e := range FailoverErrors(*in.Failover, in.Backup != nil) {
		field := "inputs.failover"
		if e.Field != "" {
			field += "." + e.Field
		}
		errs = append(errs, &InputError{field, e.Reason})
	}
	return errors.Join(errs...)
}

// failover reads a volume's failover block; each problem is reported at the
// line of the key at fault, with its path (volumes.data.failover.after).
// Whether the volume has a backup block is checked once all its keys are
// read (checkFailover).
func (d *decoder) failover(v *Volume, g field) {
	what := fmt.Sprintf("volumes.%s.failover", v.Name)
	f := &inputs.VolumeFailover{}
	afterLine := g.Line
	for _, h := range d.fields(g.Value, what, failoverFields...) {
		if h.Key == "after" {
			afterLine = h.Line
			s, ok := d.plain(h.Value, what+".after")
			if !ok {
				v.Failover = f
				return
			}
			f.After = s
		}
	}
	v.Failover = f
	for _, e := range FailoverErrors(*f, true) {
		d.errorf(afterLine, "%s.%s: %s", what, e.Field, e.Reason)
	}
}

// checkFailover refuses a failover block on a volume without backup.
func (d *decoder) checkFailover(v *Volume) {
	if v.Failover != nil && v.Backup == nil {
		e := FailoverErrors(inputs.VolumeFailover{After: "1s"}, false)[0]
		d.errorf(v.FailoverLine, "volumes.%s.failover: %s", v.Name, e.Reason)
	}
}
