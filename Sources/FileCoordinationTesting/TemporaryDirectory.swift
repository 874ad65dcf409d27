import Foundation

/// A fresh directory under the system's temporary directory, removed with everything in it when
/// the value goes away.
///
/// ```swift
/// let folder = TemporaryDirectory()
/// let settings = folder("settings.plist")            // a URL inside it (nothing created)
/// let inbox = folder.makeDirectory("mail", "inbox")  // a directory created inside it
/// ```
public final class TemporaryDirectory: @unchecked Sendable {
    /// The directory, with symbolic links resolved.
    public let url: URL

    /// Creates the directory, named `label-UUID`. A temporary directory that cannot be created
    /// stops the test process (a fixture has no caller to report to).
    public init(_ label: String = "concord-test") {
        let base = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
        url = base.appendingPathComponent("\(label)-\(UUID().uuidString)", isDirectory: true)
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// A URL inside the directory (nothing is created).
    public func callAsFunction(_ components: String...) -> URL {
        components.reduce(url) { $0.appendingPathComponent($1) }
    }

    /// Creates the directory `components` inside this one and returns it.
    @discardableResult
    public func makeDirectory(_ components: String...) -> URL {
        let result = components.reduce(url) { $0.appendingPathComponent($1) }
        try! FileManager.default.createDirectory(at: result, withIntermediateDirectories: true)
        return result
    }
}
