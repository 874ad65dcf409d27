import Foundation

/// A fresh directory under the system's temporary directory, removed when the value goes away.
public final class TemporaryDirectory: @unchecked Sendable {
    /// The directory, with symbolic links resolved.
    public let url: URL

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
