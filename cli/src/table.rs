//! Plain text tables: left-aligned columns, two spaces apart ([`ddp_workspaces::present::report::Table`]).

use ddp_workspaces::present::report::Table;

/// [`Table::to_text`] of `header` and `rows`.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    Table::new(header, rows.to_vec()).to_text()
}
