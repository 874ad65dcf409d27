import FileCoordination
import Foundation

/// version OP ITEM: what an app does with an item's versions (FileVersion), from another process.
///   resolve ITEM: marks every unresolved conflict version of ITEM resolved
///   remove-others ITEM: removes every version of ITEM but the current one
///   keep COPY ITEM: puts the version COPY in place of ITEM, by moving it
/// Prints "done", or fails.
func runVersion(_ arguments: [String]) {
    guard arguments.count >= 3 else { fail("usage: version OP ITEM") }
    let item = URL(fileURLWithPath: arguments[arguments.count - 1])
    do {
        switch arguments[1] {
        case "resolve":
            guard let versions = FileVersion.unresolvedConflictVersionsOfItem(at: item) else {
                fail("cannot list the versions of \(item.path)")
            }
            for version in versions { try version.setResolved(true) }
        case "remove-others":
            try FileVersion.removeOtherVersionsOfItem(at: item)
        case "keep":
            guard arguments.count == 4 else { fail("usage: version keep COPY ITEM") }
            let copy = URL(fileURLWithPath: arguments[2])
            guard let version = try FileVersion.versionsOfItem(at: item).first(where: { $0.url.path == copy.path })
            else { fail("\(copy.path) is not a version of \(item.path)") }
            try version.replaceItem(at: item, options: .byMoving)
        default:
            fail("unknown version operation \(arguments[1])")
        }
    } catch {
        fail("version \(arguments[1]) failed: \(error)")
    }
    say("done")
}
