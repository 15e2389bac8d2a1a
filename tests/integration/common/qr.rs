//! Reading back the QR code `pair` prints in a terminal: half-block characters (two module rows a
//! line), the light modules and the quiet zone drawn as blocks and the dark ones left blank, as a
//! dark terminal shows a dark-on-light code. The blocks become a greyscale picture (4 px a module,
//! with a margin of light around it) that `rqrr` scans as a camera picture would be.

/// The QR code's lines in `printed`: the first run of lines made only of spaces and half blocks
/// (with at least one block).
fn code_lines(printed: &str) -> Vec<&str> {
    let is_code = |l: &str| {
        !l.trim().is_empty() && l.chars().all(|c| matches!(c, ' ' | '▀' | '▄' | '█')) && l.chars().any(|c| c != ' ')
    };
    printed
        .lines()
        .skip_while(|l| !is_code(l))
        .take_while(|l| is_code(l))
        .collect()
}

/// The light (painted) modules, row by row, quiet zone included: as many rows as the lines are
/// wide (a code with its quiet zone is square; an odd side leaves the last line's lower half blank).
pub fn light_modules(printed: &str) -> Vec<Vec<bool>> {
    let lines = code_lines(printed);
    assert!(!lines.is_empty(), "no QR code (half-block lines) in:\n{printed}");
    let side = lines[0].chars().count();
    let mut rows = Vec::with_capacity(lines.len() * 2);
    for (n, line) in lines.iter().enumerate() {
        assert_eq!(line.chars().count(), side, "QR line {n} is not {side} wide:\n{printed}");
        let (mut top, mut bottom) = (Vec::with_capacity(side), Vec::with_capacity(side));
        for c in line.chars() {
            top.push(matches!(c, '▀' | '█'));
            bottom.push(matches!(c, '▄' | '█'));
        }
        rows.push(top);
        rows.push(bottom);
    }
    assert!(
        rows.len() == side || rows.len() == side + 1,
        "the QR code is {side} modules wide but {} high:\n{printed}",
        rows.len()
    );
    rows.truncate(side);
    rows
}

/// Decode the QR code in a terminal's text: its content.
pub fn decode_printed(printed: &str) -> String {
    const SCALE: usize = 4;
    const MARGIN: usize = 4; // modules of extra light around the printed quiet zone
    let light = light_modules(printed);
    let side = light.len();
    let px = (side + 2 * MARGIN) * SCALE;
    let mut img = rqrr::PreparedImage::prepare_from_greyscale(px, px, |x, y| {
        let (mx, my) = ((x / SCALE).checked_sub(MARGIN), (y / SCALE).checked_sub(MARGIN));
        match (mx, my) {
            (Some(mx), Some(my)) if mx < side && my < side => {
                if light[my][mx] {
                    255
                } else {
                    0
                }
            }
            _ => 255,
        }
    });
    let grids = img.detect_grids();
    assert_eq!(
        grids.len(),
        1,
        "expected one QR code, found {}:\n{printed}",
        grids.len()
    );
    let (_meta, content) = grids[0]
        .decode()
        .unwrap_or_else(|e| panic!("the QR code does not decode ({e:?}):\n{printed}"));
    content
}
