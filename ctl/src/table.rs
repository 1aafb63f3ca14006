//! Text tables of `spillwayctl` (`flows show`, `health show`, `service list`, `backend
//! list`, `vip show`): each column is as wide as its widest cell, header included, and never
//! narrower than its usual width, so IPv4 output keeps its layout while a full IPv6
//! endpoint (`[fd00:1:2:3:4:5:6:7]:65535`) or a 63-character name widens its column
//! instead of pushing the rest of the row out of line.

use std::fmt::Write;

/// How a column's cells are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right.
    Left,
    /// Padded on the left (numbers).
    Right,
    /// Not padded: the free text at the end of a row.
    Free,
}

/// A table being filled: columns (header, least width, alignment), then rows of cells.
pub struct Table {
    cols: Vec<(&'static str, usize, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns: (header, least width in characters, alignment).
    pub fn new(cols: &[(&'static str, usize, Align)]) -> Table {
        Table { cols: cols.to_vec(), rows: Vec::new() }
    }

    /// Adds a row: one cell per column (missing cells are empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The header line and the rows, each line starting with `indent`, cells one space
    /// apart; widths are counted in characters.
    pub fn render(&self, indent: &str) -> String {
        let width = |i: usize| {
            let cells = self.rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count());
            cells.chain([self.cols[i].0.chars().count(), self.cols[i].1]).max().unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.cols.len()).map(width).collect();
        let mut o = String::new();
        let header: Vec<String> = self.cols.iter().map(|c| c.0.to_string()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            o.push_str(indent);
            for (i, (_, _, align)) in self.cols.iter().enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                if i > 0 {
                    o.push(' ');
                }
                let w = widths[i];
                let _ = match align {
                    Align::Left => write!(o, "{c:<w$}"),
                    Align::Right => write!(o, "{c:>w$}"),
                    Align::Free => write!(o, "{c}"),
                };
            }
            o.push('\n');
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Columns keep their least width for short cells and widen to the widest cell, so a
    /// column ends at the same character on every line.
    #[test]
    fn columns_fit_the_widest_cell() {
        let mut t = Table::new(&[("a", 4, Align::Left), ("n", 3, Align::Right), ("rest", 0, Align::Free)]);
        t.row(vec!["x".into(), "1".into(), "tail".into()]);
        assert_eq!(t.render("  "), "  a      n rest\n  x      1 tail\n");
        t.row(vec!["[fd00::1]:80".into(), "12345".into(), String::new()]);
        let text = t.render("");
        // the right-aligned column now ends at character 12 + 1 + 5 on every line
        for l in text.lines() {
            let c: Vec<char> = l.chars().collect();
            assert!(c[17] != ' ' && c[18] == ' ', "{text}");
        }
        assert_eq!(text.lines().nth(2), Some("[fd00::1]:80 12345 "), "{text}");
    }
}
