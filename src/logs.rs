//! Log lines: tracing-subscriber's text or JSON lines, each line logged while a request is
//! being answered carrying that request's id.
//!
//! The id is not a tracing span. A span costs every request about 2,200 instructions whether a
//! line is written or not (a registry slot, its fields formatted into a `String` when it opens,
//! an extensions map), a tenth of a small read's whole cost (bench/README.md, "Stop 17"); and
//! at the default level a data-plane request writes no line at all. The request's future is
//! wrapped instead ([`InRequest`]): while it is polled, its id sits in a thread-local, and the
//! line formatters below write it where the span was written (text: `request{id=...}:` before
//! the target; JSON: the `span` and `spans` fields), so that the lines are as they were.
//! Work a request hands to another task (a single-flight fetch, a body streamed after the
//! answer's head) logs without an id, as it did with the span.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderValue;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

thread_local! {
    /// The id of the request this thread is polling, if any.
    static REQUEST: RefCell<Option<HeaderValue>> = const { RefCell::new(None) };
}

pin_project_lite::pin_project! {
    /// A request's future, with its id in [`REQUEST`] while it is polled.
    pub struct InRequest<F> {
        id: Option<HeaderValue>,
        #[pin]
        inner: F,
    }
}

impl<F> InRequest<F> {
    pub fn new(id: HeaderValue, inner: F) -> Self {
        Self { id: Some(id), inner }
    }

    /// The id, once the future has completed (while it is polled, the id is the thread's):
    /// for the answer's header, without a copy.
    pub fn take_id(self: Pin<&mut Self>) -> Option<HeaderValue> {
        self.project().id.take()
    }
}

impl<F: Future> Future for InRequest<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Put back when the poll ends, by unwinding too: a panic must not leave its id behind
        // for the next lines of this thread.
        struct Restore<'a> {
            id: &'a mut Option<HeaderValue>,
            outer: Option<HeaderValue>,
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                *self.id = REQUEST.with(|r| r.replace(self.outer.take()));
            }
        }
        let outer = REQUEST.with(|r| r.replace(this.id.take()));
        let _restore = Restore { id: this.id, outer };
        this.inner.poll(cx)
    }
}

/// Calls `answer` with `id` on the log lines it writes, as [`InRequest`] does for a future;
/// hands the id back with the result.
pub fn in_request<R>(id: HeaderValue, answer: impl FnOnce() -> R) -> (R, HeaderValue) {
    // Put back by unwinding too, as in `InRequest::poll`.
    struct Restore {
        outer: Option<HeaderValue>,
        unwinding: bool,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            if self.unwinding {
                REQUEST.with(|r| r.replace(self.outer.take()));
            }
        }
    }
    let mut restore = Restore { outer: REQUEST.with(|r| r.replace(Some(id))), unwinding: true };
    let answered = answer();
    restore.unwinding = false;
    let id = REQUEST.with(|r| r.replace(restore.outer.take()));
    // Always there: only this function and `InRequest` set it, and each puts back what it found.
    (answered, id.unwrap_or(HeaderValue::from_static("-")))
}

/// Calls `write` with the id of the request being answered, if any; whether there was one.
fn with_request_id(write: impl FnOnce(&str) -> fmt::Result) -> Result<bool, fmt::Error> {
    REQUEST.with(|r| match r.try_borrow().ok().as_ref().and_then(|id| id.as_ref()).and_then(|id| id.to_str().ok()) {
        Some(id) => write(id).map(|()| true),
        None => Ok(false),
    })
}

/// Installs the global subscriber: `filter` (`EnvFilter` syntax), lines as `text` or `json` to
/// stderr, colours when `ansi`.
pub fn init(filter: EnvFilter, json: bool, ansi: bool) {
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        let inner = format().json().flatten_event(true).with_current_span(true);
        builder.fmt_fields(JsonFields::new()).event_format(JsonLine { inner }).init();
    } else {
        builder.event_format(TextLine).init();
    }
}

fn format() -> format::Format {
    format::Format::default()
}

/// tracing-subscriber's full text line (`time LEVEL spans: target: fields`), with the request's
/// id as its first span.
struct TextLine;

impl<S, N> FormatEvent<S, N> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let ansi = w.has_ansi_escapes();
        if ansi {
            w.write_str("\x1b[2m")?;
        }
        SystemTime.format_time(&mut w)?;
        let level = *event.metadata().level();
        if ansi {
            let colour = match level {
                Level::ERROR => "31",
                Level::WARN => "33",
                Level::INFO => "32",
                Level::DEBUG => "34",
                Level::TRACE => "35",
            };
            write!(w, "\x1b[0m \x1b[{colour}m{level:>5}\x1b[0m ")?;
        } else {
            write!(w, " {level:>5} ")?;
        }
        let mut spans = with_request_id(|id| {
            if ansi { write!(w, "\x1b[1mrequest\x1b[0m{{id={id}}}:") } else { write!(w, "request{{id={id}}}:") }
        })?;
        for span in ctx.event_scope().into_iter().flat_map(|scope| scope.from_root()) {
            w.write_str(span.name())?;
            if let Some(fields) = span.extensions().get::<FormattedFields<N>>().filter(|f| !f.is_empty()) {
                write!(w, "{{{fields}}}")?;
            }
            w.write_char(':')?;
            spans = true;
        }
        if spans {
            w.write_char(' ')?;
        }
        if ansi {
            write!(w, "\x1b[2m{}\x1b[0m: ", event.metadata().target())?;
        } else {
            write!(w, "{}: ", event.metadata().target())?;
        }
        ctx.format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// tracing-subscriber's JSON line, with the request as the current span: `"span":{"id":...,
/// "name":"request"}` and `"spans":[...]`, as the line of an event in a `request` span had them.
struct JsonLine {
    inner: format::Format<format::Json>,
}

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        let mut spliced = false;
        with_request_id(|id| {
            // A line with a span of its own (a library's) keeps it: one `span` key only.
            let Some(object) = line.trim_end().strip_suffix('}').filter(|_| !line.contains("\"span\":")) else {
                return Ok(());
            };
            let id = serde_json::to_string(id).map_err(|_| fmt::Error)?;
            let span = format!("{{\"id\":{id},\"name\":\"request\"}}");
            spliced = true;
            writeln!(w, "{object},\"span\":{span},\"spans\":[{span}]}}")
        })?;
        if spliced { Ok(()) } else { w.write_str(&line) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    /// Lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().map(|v| v.clone()).unwrap_or_default()).unwrap_or_default()
        }
    }

    /// Logs one line outside a request, one in request `7f-1` (across an await), one after.
    fn log_lines(json: bool) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let builder = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false);
        let dispatch: tracing::Dispatch = if json {
            let inner = format().json().flatten_event(true).with_current_span(true);
            builder.fmt_fields(JsonFields::new()).event_format(JsonLine { inner }).finish().into()
        } else {
            builder.event_format(TextLine).finish().into()
        };
        tracing::dispatcher::with_default(&dispatch, || {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            runtime.block_on(async {
                tracing::warn!(n = 1, "before");
                InRequest::new(HeaderValue::from_static("7f-\"1"), async {
                    tokio::task::yield_now().await;
                    tracing::warn!(n = 2, "within");
                })
                .await;
                tracing::warn!(n = 3, "after");
            });
        });
        lines.text()
    }

    #[test]
    fn text_lines_carry_the_request_id_within_a_request_only() {
        let text = log_lines(false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains(" WARN zarrgate::logs::tests: before n=1"), "{text}");
        assert!(lines[1].contains(" WARN request{id=7f-\"1}: zarrgate::logs::tests: within n=2"), "{text}");
        assert!(lines[2].contains(" WARN zarrgate::logs::tests: after n=3"), "{text}");
    }

    #[test]
    fn json_lines_carry_the_request_as_their_span() {
        let text = log_lines(true);
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0]["message"], "before");
        assert!(lines[0].get("span").is_none(), "{text}");
        assert_eq!(lines[1]["message"], "within");
        assert_eq!(lines[1]["n"], 2);
        assert_eq!(lines[1]["level"], "WARN");
        assert_eq!(lines[1]["span"], serde_json::json!({"id": "7f-\"1", "name": "request"}));
        assert_eq!(lines[1]["spans"], serde_json::json!([{"id": "7f-\"1", "name": "request"}]));
        assert!(lines[2].get("span").is_none(), "{text}");
    }

    #[test]
    fn a_panic_in_a_request_leaves_no_id_behind() {
        let caught = std::panic::catch_unwind(|| {
            let mut request = Box::pin(InRequest::new(HeaderValue::from_static("doomed"), async { panic!("boom") }));
            let waker = futures::task::noop_waker();
            let _ = request.as_mut().poll(&mut Context::from_waker(&waker));
        });
        assert!(caught.is_err());
        let mut seen = String::new();
        with_request_id(|id| {
            seen.push_str(id);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, "");
    }
}
