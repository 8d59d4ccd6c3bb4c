//! The QuickJS engine that bakes expressions: the prelude loaded, the template's expressions
//! found, the built-ins metered, and the work budget its interrupt handler and metered
//! built-ins charge (work units, then the thread's CPU time).

use super::sampling::Sampling;
use super::{
    over_budget, BudgetBreach, Found, Metering, BYTES_PER_WORK_UNIT, MAX_EXPRESSION_CPU,
    MAX_EXPRESSION_MEMORY_BYTES, MAX_EXPRESSION_STACK_BYTES, POLL_WORK_UNITS,
};
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Function, Object, Runtime};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The After Effects vocabulary, in JavaScript.
const PRELUDE: &str = include_str!("prelude.js");
/// The wrappers charging built-ins by the bytes they touch, in JavaScript.
const METERING: &str = include_str!("metering.js");

/// The work budget of one template's expressions, charged by the interrupt handler (a poll)
/// and by the metered built-ins (bytes), on the thread that bakes.
pub(super) struct WorkBudget {
    /// Work units the template may use ([`super::work_budget`]).
    limit: u64,
    polls: AtomicU64,
    metered_bytes: AtomicU64,
    cpu_at_start: Duration,
    cpu_exceeded: AtomicBool,
}

impl WorkBudget {
    fn new(limit: u64) -> WorkBudget {
        WorkBudget {
            limit,
            polls: AtomicU64::new(0),
            metered_bytes: AtomicU64::new(0),
            cpu_at_start: crate::os::current_thread_cpu_time(),
            cpu_exceeded: AtomicBool::new(false),
        }
    }

    pub(super) fn units(&self) -> u64 {
        self.polls
            .load(Ordering::Relaxed)
            .saturating_mul(POLL_WORK_UNITS)
            .saturating_add(self.metered_bytes.load(Ordering::Relaxed) / BYTES_PER_WORK_UNIT)
    }

    pub(super) fn limit(&self) -> u64 {
        self.limit
    }

    pub(super) fn breach(&self) -> Option<BudgetBreach> {
        if self.cpu_exceeded.load(Ordering::Relaxed) {
            Some(BudgetBreach::CpuTime)
        } else if self.units() >= self.limit {
            Some(BudgetBreach::WorkUnits { limit: self.limit })
        } else {
            None
        }
    }

    fn check_cpu(&self) {
        let used = crate::os::current_thread_cpu_time().saturating_sub(self.cpu_at_start);
        if used > MAX_EXPRESSION_CPU {
            self.cpu_exceeded.store(true, Ordering::Relaxed);
        }
    }

    /// An interrupt poll; answers whether QuickJS must stop (an uncatchable exception).
    fn poll(&self) -> bool {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.check_cpu();
        self.breach().is_some()
    }

    /// Charges `bytes` touched by a metered built-in (NaN and negative charge nothing, more
    /// than the whole budget charges the whole budget); answers whether the budget is left.
    fn charge(&self, bytes: f64) -> bool {
        let whole_budget_bytes = self.limit.saturating_mul(BYTES_PER_WORK_UNIT);
        if bytes > 0.0 {
            let bytes = if bytes >= whole_budget_bytes as f64 {
                whole_budget_bytes
            } else {
                bytes.ceil() as u64
            };
            let _ =
                self.metered_bytes
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                        Some(total.saturating_add(bytes))
                    });
        }
        self.check_cpu();
        self.breach().is_none()
    }
}

/// QuickJS with the prelude loaded, the template's expressions found and the built-ins
/// metered.
pub(super) struct Engine {
    // Field order matters: the context must go before its runtime.
    context: Context,
    _runtime: Runtime,
    pub(super) budget: Arc<WorkBudget>,
    pub(super) found: Vec<Found>,
}

impl Engine {
    /// QuickJS for `template`, whose expressions may use `work_units`.
    pub(super) fn start(
        template: &str,
        frame_rate: f64,
        work_units: u64,
        metering: Metering,
    ) -> Result<Engine, String> {
        let runtime = Runtime::new().map_err(|error| error.to_string())?;
        runtime.set_memory_limit(MAX_EXPRESSION_MEMORY_BYTES);
        runtime.set_max_stack_size(MAX_EXPRESSION_STACK_BYTES);
        let budget = Arc::new(WorkBudget::new(work_units));
        let polled = Arc::clone(&budget);
        runtime.set_interrupt_handler(Some(Box::new(move || polled.poll())));
        let context = Context::full(&runtime).map_err(|error| error.to_string())?;
        let found = context.with(|ctx| -> Result<Vec<Found>, String> {
            ctx.eval::<(), _>(PRELUDE).catch(&ctx).map_err(describe)?;
            let text: String = api(&ctx, "load")?
                .call((template, frame_rate))
                .catch(&ctx)
                .map_err(describe)?;
            // Metered from here: loading parsed the template (linear in what the fence let
            // through); what follows runs the template's own code.
            if metering == Metering::On {
                let charged = Arc::clone(&budget);
                let charge = Function::new(ctx.clone(), move |bytes: f64| charged.charge(bytes))
                    .map_err(|error| error.to_string())?;
                let install: Function = ctx.eval(METERING).catch(&ctx).map_err(describe)?;
                install
                    .call::<_, ()>((charge,))
                    .catch(&ctx)
                    .map_err(describe)?;
            }
            serde_json::from_str(&text).map_err(|error| error.to_string())
        })?;
        Ok(Engine {
            context,
            _runtime: runtime,
            budget,
            found,
        })
    }

    /// The values of expression `index` on `grid`, each a number or an array of numbers.
    pub(super) fn bake(&self, index: usize, grid: &Sampling) -> Result<Vec<Value>, String> {
        let text = self.context.with(|ctx| -> Result<String, String> {
            let values: rquickjs::Value = api(&ctx, "bake")?
                .call((index, grid.start, grid.step, grid.count))
                .catch(&ctx)
                .map_err(describe)?;
            // Serialised by QuickJS's C API: our own work, not charged to the template.
            ctx.json_stringify(values)
                .catch(&ctx)
                .map_err(describe)?
                .ok_or_else(|| "the expression's value is not a number or a vector".to_owned())?
                .to_string()
                .map_err(|error| error.to_string())
        });
        // An interrupted evaluation throws "interrupted": say why instead.
        if let Some(breach) = self.budget.breach() {
            return Err(over_budget(breach));
        }
        let text = text?;
        let values: Vec<Value> = serde_json::from_str(&text).map_err(|error| error.to_string())?;
        let numeric = |value: &Value| match value {
            Value::Number(_) => true,
            Value::Array(items) => !items.is_empty() && items.iter().all(Value::is_number),
            _ => false,
        };
        // Paths (of a path property; the prelude makes them plain) are checked by the caller.
        let all_paths = values.iter().all(super::paths::is_path);
        if values.len() != grid.count || !(values.iter().all(numeric) || all_paths) {
            return Err("the expression's value is not a number, a vector or a path".to_owned());
        }
        Ok(values)
    }
}

/// A function of the prelude's `__lottieExpressions` object.
fn api<'js>(ctx: &Ctx<'js>, name: &str) -> Result<Function<'js>, String> {
    let object: Object = ctx
        .globals()
        .get("__lottieExpressions")
        .map_err(|error| error.to_string())?;
    object.get(name).map_err(|error| error.to_string())
}

/// An exception as one line: `TypeError: not a function`.
fn describe(error: CaughtError<'_>) -> String {
    match error {
        CaughtError::Exception(exception) => {
            let name: Option<String> = exception.as_object().get("name").ok();
            let message = exception.message().unwrap_or_default();
            match name {
                Some(name) if !name.is_empty() => format!("{name}: {message}"),
                _ => message,
            }
        }
        CaughtError::Value(value) => format!("uncaught {value:?}"),
        CaughtError::Error(error) => error.to_string(),
    }
}
