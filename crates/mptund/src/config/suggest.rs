//! "Did you mean …?" for misspelt keys and names.

/// The candidate closest to `word` by edit distance, if it is close enough to
/// be a plausible typo (case, `-` versus `_`, and one or two slips).
pub(super) fn closest<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    let normalised = normalise(word);
    let allowed = (normalised.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(&normalised, &normalise(candidate)), candidate))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn normalise(word: &str) -> String {
    word.trim().to_ascii_lowercase().replace('-', "_")
}

/// Edit distance over characters where inserting, deleting, replacing one
/// character or swapping two adjacent ones each cost 1 (optimal string
/// alignment distance).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let known = ["interface", "source_address", "endpoint", "name", "backup"];
        assert_eq!(closest("interfce", known), Some("interface"));
        assert_eq!(closest("Source-Address", known), Some("source_address"));
        assert_eq!(closest("nmae", known), Some("name"));
        assert_eq!(closest("bandwidth", known), None);
        assert_eq!(closest("", known), None);
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("name", "nmae"), 1);
    }
}
