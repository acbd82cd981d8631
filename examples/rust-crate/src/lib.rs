//! Roman numerals. The table starts out incomplete on purpose; the example's agent (agent.sh)
//! adds the missing numerals one step per iteration.

/// The numerals, largest first: `to_roman` writes each as often as it fits.
const NUMERALS: &[(u32, &str)] = &[
    (1, "I"),
];

/// `n` in Roman numerals (`to_roman(9) == "IX"`).
pub fn to_roman(mut n: u32) -> String {
    let mut out = String::new();
    for &(value, numeral) in NUMERALS {
        out.push_str(&numeral.repeat((n / value) as usize));
        n %= value;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_roman;

    #[test]
    fn one() {
        assert_eq!(to_roman(1), "I");
    }

    #[test]
    fn three() {
        assert_eq!(to_roman(3), "III");
    }

    #[test]
    fn four() {
        assert_eq!(to_roman(4), "IV");
    }

    #[test]
    fn six() {
        assert_eq!(to_roman(6), "VI");
    }

    #[test]
    fn eight() {
        assert_eq!(to_roman(8), "VIII");
    }

    #[test]
    fn nine() {
        assert_eq!(to_roman(9), "IX");
    }

    #[test]
    fn ten() {
        assert_eq!(to_roman(10), "X");
    }
}
