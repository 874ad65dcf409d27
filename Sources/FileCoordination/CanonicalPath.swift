import ConcordSystem
import Foundation

/// The one spelling of a path that every process agrees on, used to name its locks and to match
/// presenters: absolute, with `.` and `..` removed and the symbolic links of its parent
/// directories resolved. The last component is resolved only on request, so a link can be
/// coordinated as a link.
enum CanonicalPath {
    static func of(_ url: URL, resolvingLastComponent: Bool = false) throws(FileCoordinationError) -> String {
        guard url.isFileURL else {
            throw FileCoordinationError(code: .invalidRequest, url: url, message: "not a file URL")
        }
        let path = url.standardizedFileURL.path
        guard path.hasPrefix("/") else {
            throw FileCoordinationError(code: .invalidRequest, url: url, message: "the path is not absolute")
        }
        do {
            if resolvingLastComponent, let resolved = try FileSystem.resolvedPath(path) { return resolved }
            return try resolvingParents(of: trimmed(path))
        } catch {
            throw .systemCall(error, url: url)
        }
    }

    private static func trimmed(_ path: String) -> String {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        return path
    }

    /// Resolves the deepest existing ancestor and appends the rest as written.
    private static func resolvingParents(of path: String) throws(SystemCallError) -> String {
        if path == "/" { return path }
        var parent = FileSystem.parentPath(of: path)
        var rest = [String(path[path.index(after: path.lastIndex(of: "/")!)...])]
        while true {
            if let resolved = try FileSystem.resolvedPath(parent) {
                let base = resolved == "/" ? "" : resolved
                return base + "/" + rest.reversed().joined(separator: "/")
            }
            if parent == "/" { return path }
            rest.append(String(parent[parent.index(after: parent.lastIndex(of: "/")!)...]))
            parent = FileSystem.parentPath(of: parent)
        }
    }

    /// The proper ancestors of a canonical path, outermost first, without `/`.
    static func ancestors(of path: String) -> [String] {
        var result: [String] = []
        var index = path.index(after: path.startIndex)
        while let slash = path[index...].firstIndex(of: "/") {
            result.append(String(path[..<slash]))
            index = path.index(after: slash)
        }
        return result
    }

    /// Whether `descendant` lies strictly inside `ancestor`.
    static func isStrictlyInside(_ descendant: String, _ ancestor: String) -> Bool {
        let inner = descendant.utf8
        let outer = ancestor.utf8
        if ancestor == "/" { return descendant != "/" }
        guard inner.count > outer.count, inner.starts(with: outer) else { return false }
        return inner[inner.index(inner.startIndex, offsetBy: outer.count)] == UInt8(ascii: "/")
    }
}
