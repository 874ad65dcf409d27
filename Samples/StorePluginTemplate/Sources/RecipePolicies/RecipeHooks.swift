import Foundation
import Persistence

/// Hooks for `Recipe` that know where a change comes from (``ChangeOrigin``).
///
/// - A recipe inserted locally gets its `created` and `edited` dates and, with no category,
///   Uncategorized: the "awake from insert" defaults. An imported recipe is left exactly as the
///   other device wrote it: its dates are that device's, and filling them again here would
///   make each device's copy differ.
/// - A local save stamps `edited`; an import never does (it would turn every arrival into a
///   new local edit that syncs back, forever).
/// - ``didChangeLocally(_:change:context:)`` is the one place for side effects on other
///   records; it never runs for imports, whose side effects their device already made.
public struct RecipeHooks: EntityHooks {
    /// `"Recipe"`.
    public let entityName = "Recipe"
    /// The clock (a test passes a fixed one).
    public let now: @Sendable () -> Date

    /// Hooks that stamp dates from `now`.
    public init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
    }

    /// A local insert: the dates, and Uncategorized when the recipe has no category.
    public func didInsert(_ record: inout Record, origin: ChangeOrigin, context: ObjectContext) throws {
        guard origin == .local else { return }
        let date = Value.date(now())
        if record["created"] == .null { record["created"] = date }
        if record["edited"] == .null { record["edited"] = date }
        if record.toOne["category"] == nil {
            if try context.record(with: RecipeModel.uncategorizedID) == nil {
                try context.insert(RecipeModel.uncategorized())
            }
            record.toOne["category"] = RecipeModel.uncategorizedID
        }
    }

    /// A local update: stamps `edited`.
    public func willSave(
        _ record: inout Record,
        change: RecordChangeKind,
        origin: ChangeOrigin,
        context: ObjectContext
    ) throws {
        guard origin == .local, change == .update else { return }
        record["edited"] = .date(now())
    }
}
