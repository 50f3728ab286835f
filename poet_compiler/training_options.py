"""Help of the ``--optimizer`` and ``--train`` options that every command tracing a model shares."""

from __future__ import annotations

OPTIMIZER_HELP = ("apply this optimizer's update inside the step (docs/training.md): sgd:lr=0.05,momentum=0.9 "
                  "(keys lr, momentum, weight_decay, nesterov), adam:lr=1e-3 or adamw:lr=1e-3 (keys lr, beta1, "
                  "beta2, eps, weight_decay); parameters and optimizer state then count in the RAM budget")
TRAIN_HELP = ("train only the parameters these comma-separated name globs match, freeze the others "
              "(e.g. 'classifier.*,*.bias'; a bare word such as bias matches a last name component, after '.' or '_')")
