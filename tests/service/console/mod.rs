//! The web console (`/console/`, docs/console.md) over a real server: its answers' security
//! headers, verbs and files (`headers`), and a person's walk through it in Debian's headless
//! Chromium with authentication on and off (`browser`).

mod browser;
mod headers;
