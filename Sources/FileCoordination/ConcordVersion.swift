/// The Concord package as a whole.
public enum Concord {
    /// The package's version (semantic versioning): what `concord --version` and the samples'
    /// `--version` print, and what a release is tagged with.
    public static let version = "0.1.0"
}
