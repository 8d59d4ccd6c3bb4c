//! Tests that load the machine on purpose (busy loops on every core), in a part and a phase
//! of their own (`./dev test` runs each part as a phase): beside the hostile part's tests they
//! would slow those tests' bystanders past their bounds.

mod verdicts_under_load;
