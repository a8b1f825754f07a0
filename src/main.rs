//! The `zarrgate` command: parse flags, load the configuration, serve; or print the
//! configuration; or drive a running server's control plane (`zarrgate::cli`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use zarrgate::app::{self, App};
use zarrgate::config::Config;

/// mimalloc instead of the system allocator: it keeps freed pages for reuse instead of
/// unmapping and faulting them in again on every large chunk, and returns memory to the OS once
/// idle (bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "zarrgate",
    version,
    about = "Serve archival files as a Zarr v3 store over HTTP",
    long_about = "Serve archival files as a Zarr v3 store over HTTP.\n\n\
        `zarrgate` alone runs the server, with the same flags as `zarrgate serve`: \
        `zarrgate --listen 0.0.0.0:8080` and `zarrgate serve --listen 0.0.0.0:8080` are one command. \
        `zarrgate stores ...` and `zarrgate object-stores ...` drive a running server's control plane \
        (`--server`, default http://127.0.0.1:8080; admin token from ZARRGATE_TOKEN).",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The server's flags, for `zarrgate` with no command.
    #[command(flatten)]
    serve: ServeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (what `zarrgate` with no command does, with the same flags).
    Serve(ServeArgs),
    /// Print the effective configuration as TOML, secrets redacted: `--config` takes it back.
    Config(ServeArgs),
    /// Register, list, show, export, verify and delete stores on a running server.
    Stores(zarrgate::cli::Stores),
    /// Register, list and delete the object stores a running server reads sources from.
    ObjectStores(zarrgate::cli::ObjectStores),
}

#[derive(clap::Args, Default)]
struct ServeArgs {
    /// Configuration file (also ZARRGATE_CONFIG).
    #[arg(long, env = "ZARRGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on, host:port (overrides ZARRGATE_LISTEN).
    #[arg(long)]
    listen: Option<String>,
    /// Catalog database URL (overrides DATABASE_URL).
    #[arg(long)]
    database_url: Option<String>,
    /// Allow a non-loopback address with no admin token.
    #[arg(long)]
    insecure: bool,
}

fn load(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(args.config.as_deref(), |k| std::env::var(k).ok())?;
    if let Some(listen) = &args.listen {
        config.listen = listen.clone();
    }
    if let Some(url) = &args.database_url {
        config.database_url = url.clone();
    }
    config.insecure |= args.insecure;
    config.listen_addr()?;
    Ok(config)
}

fn init_logs(config: &Config) {
    let filter = EnvFilter::try_from_env("ZARRGATE_LOG").unwrap_or_else(|_| EnvFilter::new(&config.log_level));
    use std::io::IsTerminal;
    zarrgate::logs::init(filter, config.log_format == "json", std::io::stderr().is_terminal());
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    app::check_exposure(&config)?;
    let addr = config.listen_addr()?;
    let drain = Duration::from_secs(config.http.drain_seconds);
    let state = App::start(config).await?;
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    tracing::info!(address = %local, catalog = state.catalog.backend(), "zarrgate listening on http://{local}");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!(drain_seconds = drain.as_secs(), "shutting down: draining in-flight requests");
        let _ = stop_tx.send(());
        tokio::time::sleep(drain).await;
        tracing::warn!("drain deadline passed; exiting with requests still in flight");
        std::process::exit(0);
    });
    zarrgate::server::serve(listener, state, async {
        let _ = stop_rx.await;
    })
    .await?;
    tracing::info!("stopped");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => {
            let config = load(&args)?;
            init_logs(&config);
            serve(config).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(args) => {
            print!("{}", load(&args)?.to_redacted_toml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Stores(command) => Ok(zarrgate::cli::stores(command).await),
        Command::ObjectStores(command) => Ok(zarrgate::cli::object_stores(command).await),
    }
}
